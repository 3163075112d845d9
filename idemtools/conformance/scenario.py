"""The kit's machinery: what a scenario may use, what it answers, and how an answer is recorded.

A scenario makes a few `tools/call`s against the fixture tools through its `Context` and decides
several checks from what it observed (`Outcomes`); every scenario uses fresh keys and labels, so
repeated runs against one long-lived server never see each other's records. `record` adds one
check's outcome to the report, with its sentence (`sentences.CHECKS`) and the scenario's
exchanges as evidence. The helpers at the end are the verdicts every scenario module shares.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .contract import COUNT, FIXTURE_TOOLS, executions_of
from .defaults import default_differences, without_defaults
from .jsonvalues import strict_equal
from .report import Report, Result, Status
from .sentences import CHECKS  # one table: the catalogue adds the families' checks in place
from .wire import LEGACY, MODERN, RAW_TEXT, Raw, Wire, WireError, encode

__all__ = [
    "Context",
    "OpenError",
    "Outcome",
    "Outcomes",
    "Reply",
    "Scenario",
    "WireOpener",
    "record",
]


class OpenError(WireError):
    """The second caller's or the other instance's connection was refused."""


@dataclass
class Reply:
    """One `tools/call` answer, as the kit reads it (`text`: the raw JSON text, when kept)."""

    raw: dict[str, Any]
    elapsed: float
    text: str | None = None

    @property
    def result(self) -> dict[str, Any] | None:
        result = self.raw.get("result")
        return result if isinstance(result, dict) else None

    @property
    def error(self) -> dict[str, Any] | None:
        error = self.raw.get("error")
        return error if isinstance(error, dict) else None

    @property
    def is_error_result(self) -> bool:
        return self.result is not None and self.result.get("isError") is True

    @property
    def rejected(self) -> bool:
        """Refused with an error: a JSON-RPC error, or an `isError` result."""
        return self.error is not None or self.is_error_result

    @property
    def executions(self) -> int | None:
        return executions_of(self.result)

    def error_data(self) -> dict[str, Any] | None:
        data = (self.error or {}).get("data")
        return data if isinstance(data, dict) else None

    def error_type(self) -> str | None:
        """`error.data.type`: how a refusal is told apart (never by code: SDKs answer codes of
        their own, e.g. -32000 at shutdown, -32800 on cancellation)."""
        kind = (self.error_data() or {}).get("type")
        return kind if isinstance(kind, str) else None

    def same_result(self, other: Reply) -> bool:
        """Equal results, ignoring `_meta` (where a server may mark a replay) and members that
        hold their schema default in one and are absent in the other (`defaults`)."""
        if self.result is None or other.result is None:
            return False
        return without_defaults(self.result) == without_defaults(other.result)

    def default_note(self, original: Reply) -> str | None:
        """The note a passing replay carries when it differs from `original` only by a member
        holding its schema default, present in one and absent in the other."""
        if self.result is None or original.result is None:
            return None
        found = default_differences(original.result, self.result)
        return "; ".join(found) + " (a schema default: accepted)" if found else None

    def same_error(self, other: Reply) -> bool:
        """The same JSON-RPC error object, type-strictly."""
        return self.error is not None and strict_equal(self.error, other.error)

    def show(self) -> str:
        if self.error is not None:
            text = encode({k: self.error.get(k) for k in ("code", "message", "data")})
        else:
            text = encode(self.result)
        return text if len(text) <= 200 else text[:197] + "..."


WireOpener = Callable[[], Awaitable[Wire]]
_EVIDENCE_LIMIT = 24  # exchanges kept per scenario: the first and last halves
_EVIDENCE_CHARS = 2000


@dataclass
class Context:
    """What a scenario may use: the main wire, optional second caller and second instance."""

    era: str
    wire: Wire
    run_id: str
    slow_ms: int = 1500
    second_caller: WireOpener | None = None
    second_caller_why_not: str = "give --second-header for a second authorized caller"
    other_instance: WireOpener | None = None
    reconnect: WireOpener | None = None  # the same caller on a new connection (HTTP only)
    retention: float | None = None
    # A tool the operator named (`--tool NAME --arguments JSON`): the fixture-free checks call
    # it with exactly those arguments, and only where the fixture tools are absent.
    named_tool: tuple[str, dict[str, Any]] | None = None
    fixtures_ok: bool = True  # every required fixture tool is listed and keeps the contract
    transcript: list[dict[str, Any]] = field(default_factory=list)
    errors: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    causes: dict[str, str] = field(default_factory=dict)  # failure detail -> first check id
    era_causes: dict[str, str] = field(default_factory=dict)  # the same, for wire failures
    failed: set[str] = field(default_factory=set)  # checks failed in this era
    _opened: list[Wire] = field(default_factory=list)
    _tools: set[str] | None = None

    def fresh(self, what: str) -> str:
        return f"conf-{self.run_id}-{self.era}-{what}-{uuid.uuid4().hex[:8]}"

    async def open(self, opener: WireOpener) -> Wire:
        """A second connection (second caller, other instance); OpenError when it is refused:
        that is a misconfigured run (exit 2), not a failed check."""
        try:
            wire = await opener()
        except WireError as exc:
            raise OpenError(str(exc)) from None
        self._opened.append(wire)
        return wire

    async def aclose(self) -> None:
        for wire in self._opened:
            await wire.aclose()
        self._opened.clear()

    async def has_tool(self, name: str) -> bool:
        """Whether `tools/list` names `name` (all pages; asked once per era)."""
        if self._tools is None:
            found: set[str] = set()
            cursor: str | None = None
            for _page in range(20):
                reply = await self.wire.request("tools/list", {"cursor": cursor} if cursor else {})
                result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
                tools = result.get("tools") if isinstance(result, dict) else None
                for tool in tools if isinstance(tools, list) else []:
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                        found.add(tool["name"])
                cursor = result.get("nextCursor") if isinstance(result, dict) else None
                if not isinstance(cursor, str) or not cursor:
                    break
            self._tools = found
        return name in self._tools

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any] | Raw,
        key: str | None = None,
        *,
        wire: Wire | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Reply:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if key is not None:
            params["idempotencyKey"] = key
        params.update(extra or {})
        start = time.monotonic()
        raw = await (wire or self.wire).request("tools/call", params)
        text = raw.pop(RAW_TEXT, None)
        reply = Reply(raw, time.monotonic() - start, text if isinstance(text, str) else None)
        sent = encode(params)
        self.transcript.append({"request": _cut(sent), "answer": _cut_json(raw)})
        if reply.error is not None:
            self.errors.append((reply.error, sent))
        return reply

    async def count(self, label: str, *, wire: Wire | None = None) -> int | None:
        return (await self.call(COUNT, {"label": label}, wire=wire)).executions

    def evidence(self) -> tuple[dict[str, Any], ...]:
        kept = self.transcript
        if len(kept) > _EVIDENCE_LIMIT:
            half = _EVIDENCE_LIMIT // 2
            kept = [*kept[:half], {"omitted": len(kept) - 2 * half}, *kept[-half:]]
        return tuple(kept)


def _cut(text: str) -> str:
    return text if len(text) <= _EVIDENCE_CHARS else text[: _EVIDENCE_CHARS - 3] + "..."


def _cut_json(value: dict[str, Any]) -> Any:
    text = json.dumps(value, ensure_ascii=False)
    return value if len(text) <= _EVIDENCE_CHARS else _cut(text)


# An outcome: (status, detail), or (status, detail, extra) where extra may hold "enable" (for a
# skip: what would run the check; absent: nothing would, not applicable) and "blocked_by".
Outcome = tuple[Status, str] | tuple[Status, str, Mapping[str, Any]]
Outcomes = dict[str, Outcome]


@dataclass(frozen=True)
class Scenario:
    name: str
    checks: tuple[str, ...]
    run: Callable[[Context], Awaitable[Outcomes]]
    eras: frozenset[str] = frozenset({LEGACY, MODERN})
    # The fixture tools the scenario calls: where one is absent its checks are blocked, where
    # one breaks the contract they are fixture errors (the runner decides, before it runs).
    fixtures: tuple[str, ...] = FIXTURE_TOOLS
    family: str = ""  # the rule it tests (`families.FAMILIES`); `--family` selects by it


def record(report: Report, ctx: Context, check_id: str, outcome: Outcome) -> Result:
    """Add one check's outcome to the report, with its sentence and the scenario's evidence.

    One bug, one failure: a failure whose detail an earlier failed check of this era already
    reported (the same first call that did not answer, the same dead connection) is `blocked`
    by that check rather than counted again, and so is a failure of a check whose prerequisite
    (`CheckInfo.after`) failed in this era; `extra["blocked_by"]` names one explicitly.
    """
    info = CHECKS[check_id]
    status, detail = outcome[0], outcome[1]
    extra: Mapping[str, Any] = outcome[2] if len(outcome) > 2 else {}
    blocked_by = extra.get("blocked_by")
    if status == "fail":
        causes = ctx.era_causes if detail.startswith("wire failure") else ctx.causes
        first = causes.setdefault(detail, check_id)
        if first != check_id:
            status, blocked_by = "blocked", first
        elif info.after is not None and info.after in ctx.failed:
            status, blocked_by = "blocked", info.after
    if blocked_by is not None:
        status = "blocked"
    if status == "fail":
        ctx.failed.add(check_id)
    result = Result(
        check_id,
        info.level,
        status,
        info.section,
        detail,
        ctx.era,
        text=info.text,
        url=info.url,
        evidence=ctx.evidence() if status != "skip" else (),
        blocked_by=blocked_by,
        enable=extra.get("enable"),
    )
    report.results.append(result)
    return result


def _verdict(ok: bool, good: str, bad: str) -> Outcome:
    return ("pass", good) if ok else ("fail", bad)


def _noted(outcome: Outcome, note: str | None) -> Outcome:
    """A pass that needed an allowance says so: `note`, with the allowance in its detail."""
    if note is None or outcome[0] != "pass":
        return outcome
    return ("note", f"{outcome[1]}; {note}")


def _all(checks: tuple[str, ...], outcome: Outcome) -> Outcomes:
    return dict.fromkeys(checks, outcome)


async def _first(ctx: Context, checks: tuple[str, ...], reply: Reply) -> Outcomes | None:
    """When the first keyed call did not execute normally, nothing after it can be judged."""
    if reply.executions is None:
        return _all(checks, ("fail", f"the first keyed call did not answer: {reply.show()}"))
    return None


def _scenario(
    run: Callable[[Context], Awaitable[Outcomes]],
    *checks: str,
    eras: frozenset[str] | None = None,
    fixtures: tuple[str, ...] = FIXTURE_TOOLS,
) -> Scenario:
    async def fresh_evidence(ctx: Context) -> Outcomes:
        ctx.transcript = []  # each check's evidence: the exchanges of its own scenario
        ctx.causes = {}
        return await run(ctx)

    return Scenario(
        run.__name__,
        tuple(c if c.startswith("mcp-base-") else f"sep-3182-{c}" for c in checks),
        fresh_evidence,
        eras if eras is not None else frozenset({LEGACY, MODERN}),
        fixtures,
    )
