"""Before any check: which fixture tools the target lists, and whether each keeps the contract.

A fixture that is present but answers outside the contract (no count, the wrong count, a result
where an error is due) would turn every check that calls it into a false SEP failure. The probe
calls each listed fixture without a key, with fresh labels and distinct payloads (so that no
idempotency rule of the server can apply), and compares the answers with the contract. A broken
fixture makes the checks that need it `fixture-error`, not `fail`; an absent one makes them
`blocked`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .contract import (
    COUNT,
    FAIL,
    FIXTURE_TOOLS,
    RECORD,
    RECORD_SLOW,
    THROW,
    executions_of,
    throw_count,
    throw_uses_old_field,
)
from .wire import RAW_TEXT, Wire, WireError, encode

__all__ = ["Fixtures", "probe"]

ALL = (*FIXTURE_TOOLS, THROW)
_SHOWN = 300


@dataclass
class Fixtures:
    """What the probe found in one era: tools listed, absent, broken (with what was sent and
    what came back), and notes (a fixture answering the contract's older field name)."""

    listed: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # every tool the target lists
    broken: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def absent(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if n not in self.listed]

    def broken_of(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if n in self.broken]

    @property
    def required_ok(self) -> bool:
        return not self.absent(FIXTURE_TOOLS) and not self.broken_of(FIXTURE_TOOLS)


async def list_tools(wire: Wire) -> set[str] | None:
    """Every tool name `tools/list` gives (all pages), or None when it failed."""
    found: set[str] = set()
    cursor: str | None = None
    for _page in range(20):
        reply = await wire.request("tools/list", {"cursor": cursor} if cursor else {})
        result = reply.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return found or None
        for tool in result["tools"]:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                found.add(tool["name"])
        cursor = result.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return found


class _Probe:
    def __init__(self, wire: Wire, fixtures: Fixtures) -> None:
        self.wire = wire
        self.fixtures = fixtures

    async def call(self, name: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {"name": name, "arguments": arguments}
        reply = await self.wire.request("tools/call", params)
        reply = {k: v for k, v in reply.items() if k != RAW_TEXT}
        return encode(params), reply

    def broken(self, name: str, sent: str, got: dict[str, Any], wanted: str) -> None:
        shown = encode(got)
        shown = shown if len(shown) <= _SHOWN else shown[: _SHOWN - 3] + "..."
        self.fixtures.broken.setdefault(
            name, f"sent tools/call {sent} without a key; got {shown}; the contract: {wanted}"
        )

    async def counting(self, name: str, label: str, want: int, *, error: bool = False) -> None:
        sent, got = await self.call(name, {"label": label, "payload": uuid.uuid4().hex})
        result = got.get("result")
        n = executions_of(result)
        is_error = isinstance(result, dict) and result.get("isError") is True
        if n != want or is_error != error:
            kind = "an isError result" if error else "a result"
            self.broken(name, sent, got, f'{kind} whose text is {{"label", "executions": {want}}}')

    async def count(self, label: str, want: int) -> None:
        sent, got = await self.call(COUNT, {"label": label})
        if executions_of(got.get("result")) != want:
            self.broken(
                COUNT, sent, got, f"the current count of the label, {want}, executing nothing"
            )

    async def throw(self, label: str) -> None:
        sent, got = await self.call(THROW, {"label": label, "payload": uuid.uuid4().hex})
        error = got.get("error")
        if not isinstance(error, dict) or throw_count(error) != 1:
            self.broken(
                THROW,
                sent,
                got,
                'a JSON-RPC error (not a result) whose data is {"label", "executions": 1}',
            )
        elif throw_uses_old_field(error):
            self.fixtures.notes.append(
                f"{THROW} answers data.count where the contract names it data.executions (as "
                "the results do): accepted"
            )


async def probe(wire: Wire, run_id: str) -> Fixtures | None:
    """The fixtures of the target in `wire`'s era; None when `tools/list` failed."""
    listed = await list_tools(wire)
    if listed is None:
        return None
    fixtures = Fixtures(listed={n for n in ALL if n in listed}, names=listed)
    p = _Probe(wire, fixtures)

    def fresh(what: str) -> str:
        return f"conf-{run_id}-{wire.era}-probe-{what}-{uuid.uuid4().hex[:8]}"

    try:
        await _calls(p, fixtures, fresh)
    except WireError as exc:
        # A target that hangs, floods or dies is not a broken fixture: the checks meet the same
        # behaviour and report it (or the run stops); the probe judged what it could.
        fixtures.notes.append(f"{wire.era}: the fixture probe was cut short: {exc}")
    return fixtures


async def _calls(p: _Probe, fixtures: Fixtures, fresh: Callable[[str], str]) -> None:
    has = fixtures.listed.__contains__
    if has(RECORD):
        label = fresh("record")
        await p.counting(RECORD, label, 1)
        await p.counting(RECORD, label, 2)
        if has(COUNT) and RECORD not in fixtures.broken:  # else the count proves nothing
            await p.count(label, 2)
            await p.count(label, 2)  # counting executes nothing
    if has(COUNT) and COUNT not in fixtures.broken:
        await p.count(fresh("count"), 0)
    if has(FAIL):
        await p.counting(FAIL, fresh("fail"), 1, error=True)
    if has(RECORD_SLOW):
        label = fresh("slow")
        sent, got = await p.call(RECORD_SLOW, {"label": label, "ms": 0})
        if executions_of(got.get("result")) != 1:
            p.broken(RECORD_SLOW, sent, got, 'a result whose text is {"label", "executions": 1}')
    if has(THROW):
        await p.throw(fresh("throw"))
