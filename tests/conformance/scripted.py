"""A SEP-3182 server in this process, behind the kit's own `Wire`: fast cases for the report.

Not a mock of anything the kit talks to in production: it is a small, complete server (records,
fixtures, capability) whose answers a test bends in one way at a time (`restrict_keys`,
`merge_keys`, `replay_edit`, `throw_field`, `broken`), to show how the kit judges exactly that
difference. The wire-level proofs with real servers are in test_proofs.py and test_unfixtured.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from idemtools.conformance.catalogue import SCENARIOS
from idemtools.conformance.checks import Context, record
from idemtools.conformance.contract import COUNT, FAIL, RECORD, RECORD_SLOW, THROW, answer_text
from idemtools.conformance.report import Report
from idemtools.conformance.wire import LEGACY, Wire

Edit = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Scripted:
    restrict_keys: bool = False  # refuse keys with spaces or non-ASCII: idempotency_key_invalid
    merge_keys: bool = False  # casefold and strip keys: two distinct keys become one
    replay_edit: Edit | None = None  # applied to every replayed result
    first_edit: Edit | None = None  # applied to every result as first produced
    throw_field: str = "executions"
    broken: str | None = None  # a fixture that answers "ok" and no count
    tools: tuple[str, ...] = (RECORD, RECORD_SLOW, FAIL, COUNT, THROW)
    extra_tools: tuple[str, ...] = ()
    capability: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    records: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            caps: dict[str, Any] = {"tools": {"idempotency": {}} if self.capability else {}}
            return {"result": {"protocolVersion": LEGACY, "capabilities": caps}}
        if method == "tools/list":
            names = (*self.tools, *self.extra_tools)
            return {"result": {"tools": [{"name": n, "inputSchema": {}} for n in names]}}
        if method != "tools/call":
            return {"error": {"code": -32601, "message": "no such method"}}
        return self.call(params)

    def call(self, params: dict[str, Any]) -> dict[str, Any]:
        key = params.get("idempotencyKey")
        if key is not None and not isinstance(key, str):
            return _invalid(key)
        if isinstance(key, str) and self.restrict_keys and (" " in key or not key.isascii()):
            return _invalid(key)
        if key is None or params["name"] == COUNT:
            return self.execute(params)
        stored = key.casefold().strip() if self.merge_keys else key
        fingerprint = json.dumps([params["name"], params.get("arguments")], sort_keys=True)
        if stored in self.records:
            was, answer = self.records[stored]
            if was != fingerprint:
                return {
                    "error": {
                        "code": -31052,
                        "message": "conflict",
                        "data": {"type": "idempotency_key_conflict", "idempotencyKey": key},
                    }
                }
            answer = copy.deepcopy(answer)
            if self.replay_edit is not None and "result" in answer:
                answer["result"] = self.replay_edit(answer["result"])
            return answer
        answer = self.execute(params)
        self.records[stored] = (fingerprint, copy.deepcopy(answer))
        return answer

    def execute(self, params: dict[str, Any]) -> dict[str, Any]:
        name, arguments = params["name"], params.get("arguments") or {}
        if name not in self.tools and name not in self.extra_tools:
            return {"error": {"code": -32602, "message": f"unknown tool {name}"}}
        if name in self.extra_tools:
            return {"result": {"content": [{"type": "text", "text": json.dumps(arguments)}]}}
        label = str(arguments.get("label"))
        if name == self.broken:
            return {"result": {"content": [{"type": "text", "text": "ok"}]}}
        if name == COUNT:
            return {"result": self.result(label, self.counts.get(label, 0))}
        n = self.counts[label] = self.counts.get(label, 0) + 1
        if name == THROW:
            data = {"label": label, self.throw_field: n}
            return {"error": {"code": 1001, "message": "thrown", "data": data}}
        return {"result": self.result(label, n, error=name == FAIL)}

    def result(self, label: str, n: int, *, error: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {"content": [{"type": "text", "text": answer_text(label, n)}]}
        out["isError"] = error
        return self.first_edit(out) if self.first_edit is not None else out


def _invalid(key: Any) -> dict[str, Any]:
    return {
        "error": {
            "code": -32602,
            "message": "idempotencyKey: a string of printable ASCII without spaces",
            "data": {"type": "idempotency_key_invalid", "idempotencyKey": key},
        }
    }


class ScriptedWire(Wire):
    """The kit's `Wire`, answered by a `Scripted` server instead of a process or a socket."""

    def __init__(self, server: Scripted) -> None:
        super().__init__(LEGACY, 5.0)
        self.server = server

    async def _exchange(
        self, rid: int, method: str, params: dict[str, Any] | None, text: str
    ) -> dict[str, Any]:
        sent = json.loads(text).get("params") or {}
        return {"jsonrpc": "2.0", "id": rid, **self.server.answer(method, sent)}

    async def _notify(self, method: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


async def judge(server: Scripted, *names: str) -> Report:
    """Run the named scenarios (by function name) against `server`; the report."""
    wire = ScriptedWire(server)
    await wire.open()
    report = Report("scripted", [LEGACY])
    ctx = Context(era=LEGACY, wire=wire, run_id="t", slow_ms=100)
    for scenario in SCENARIOS:
        if scenario.name in names and LEGACY in scenario.eras:
            outcomes = await scenario.run(ctx)
            for check in scenario.checks:
                record(report, ctx, check, outcomes[check])
    return report
