"""The checks: each tied to the SEP-3182 sentence it tests, grouped in scenarios that share calls.

A check is an id, a level (the keyword of the sentence it tests), the SEP section, and that
sentence. A scenario makes a few `tools/call`s against the fixture tools and decides several
checks from what it observed; every scenario uses fresh keys and labels, so repeated runs against
one long-lived server never see each other's records. `sep-3182.yaml` maps the same ids (and
every normative sentence no black box can observe, with the reason) in the official conformance
suite's traceability format; a test keeps the two in step.
"""

from __future__ import annotations

import asyncio
import time
import unicodedata
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .contract import COUNT, FAIL, RECORD, RECORD_SLOW, executions_of
from .report import Level, Status
from .wire import LEGACY, MODERN, Raw, Wire, WireError, encode

__all__ = ["CHECKS", "SCENARIOS", "CheckInfo", "Context", "OpenError", "Reply", "Scenario"]


@dataclass(frozen=True)
class CheckInfo:
    id: str
    level: Level
    section: str
    text: str


def _c(id_: str, level: Level, section: str, text: str) -> CheckInfo:
    return CheckInfo(f"sep-3182-{id_}", level, section, text)


_REPEAT = "Server behavior on a repeated key"
_EQ = "Request equivalence"
CHECKS: dict[str, CheckInfo] = {
    c.id: c
    for c in [
        _c(
            "capability-initialize",
            "MUST",
            "Capability declaration",
            "This SEP introduces the `tools.idempotency` capability [...] "
            '{"capabilities": {"tools": {"idempotency": {}}}} (2025-11-25: the initialize result)',
        ),
        _c(
            "capability-discover",
            "MUST",
            "Capability declaration",
            "This SEP introduces the `tools.idempotency` capability, discoverable via "
            "`server/discover` (SEP-2575)",
        ),
        _c(
            "duplicate-not-executed",
            "MUST",
            _REPEAT,
            "If the new request's arguments are equivalent to the arguments of a completed "
            "original call [...], the server MUST NOT execute the tool again.",
        ),
        _c(
            "duplicate-returns-original",
            "MUST",
            _REPEAT,
            "It MUST return the previously produced result",
        ),
        _c(
            "error-replayed",
            "MUST",
            _REPEAT,
            "It MUST return the previously produced result — whether that result was a "
            "successful response or an error response",
        ),
        _c(
            "in-progress-no-second-execution",
            "MUST",
            _REPEAT,
            "If a request bearing the same key is still executing [...] the server MUST NOT "
            "begin a second execution of the tool for the duplicate request",
        ),
        _c(
            "in-progress-not-blocked",
            "MUST",
            _REPEAT,
            "[...] and MUST NOT block the duplicate request indefinitely waiting for the "
            "original to finish.",
        ),
        _c(
            "in-progress-rejected-immediately",
            "SHOULD",
            _REPEAT,
            "Instead, the server SHOULD reject the duplicate immediately with an error "
            "indicating a request with this key is already in progress",
        ),
        _c(
            "in-progress-error-data",
            "SHOULD",
            _REPEAT,
            "servers SHOULD populate `error.data` with a structured value identifying this "
            'specific failure mode (for example {"type": "idempotency_key_in_progress", '
            '"idempotencyKey": "<the key>"})',
        ),
        _c(
            "conflict-rejected",
            "MUST",
            _REPEAT,
            "If the new request's arguments differ from the arguments of the original call, "
            "the server MUST reject the request with an error indicating the key was "
            "previously used with different arguments.",
        ),
        _c(
            "conflict-not-executed",
            "MUST",
            _REPEAT,
            "The server MUST NOT execute the tool with the new arguments",
        ),
        _c(
            "conflict-no-cached-result",
            "MUST",
            _REPEAT,
            "and MUST NOT silently return the cached result from the original, "
            "differently-parameterized call.",
        ),
        _c(
            "conflict-error-data",
            "SHOULD",
            _REPEAT,
            "servers SHOULD populate the standard JSON-RPC `error.data` field [...] for example "
            '{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}',
        ),
        _c(
            "conflict-tool-name",
            "MUST",
            _EQ,
            "Two requests bearing the same `idempotencyKey` are equivalent if they specify the "
            "same tool name and equivalent arguments (another tool name is a conflict: "
            "rejected, not executed, not replayed)",
        ),
        _c(
            "equivalence-key-order",
            "MUST",
            _EQ,
            '`{"a": 1, "b": 2}` and `{"b": 2, "a": 1}` MUST be treated as equivalent despite '
            "differing key order",
        ),
        _c(
            "equivalence-whitespace",
            "MUST",
            _EQ,
            "servers MUST NOT treat two requests as different solely because of differences in "
            "whitespace, key ordering, or other serialization detail",
        ),
        _c(
            "equivalence-escapes",
            "MUST",
            _EQ,
            "two differently-escaped encodings of the same string (for example, a literal "
            "character versus its `\\uXXXX` escape) MUST be treated as equivalent",
        ),
        _c(
            "equivalence-numbers",
            "MUST",
            _EQ,
            "numeric values representing the same mathematical value MUST compare equal — `1` "
            "and `1.0` MUST be treated as the same value",
        ),
        _c(
            "no-unicode-normalization",
            "MUST",
            _EQ,
            "This SEP does not require Unicode normalization (e.g., NFC/NFD) beyond what parsing "
            "already resolves; two strings that are distinct after parsing remain distinct",
        ),
        _c(
            "unkeyed-unaffected",
            "MUST",
            "Backward Compatibility",
            "A client MAY omit `idempotencyKey` entirely and receive the same behavior as before "
            "this proposal.",
        ),
        _c(
            "scope-per-caller",
            "MUST",
            "Security Implications",
            "Servers MUST scope their idempotency records to whatever authorization boundary "
            "already governs access to the underlying tool call [...] so that a key is only ever "
            "matched against a prior request from the same authorized caller.",
        ),
        _c(
            "mrtr-continuation-excluded",
            "SHOULD",
            "Relationship to the 2026-07-28 stateless core and MRTR",
            "This SEP does not define idempotency semantics for `tools/call` requests carrying "
            "MRTR continuation fields such as `requestState` and `inputResponses`; such requests "
            "are intentionally outside the scope of this proposal",
        ),
        _c(
            "shared-store",
            "MUST",
            "Relationship to the 2026-07-28 stateless core and MRTR",
            "A server implementing this SEP in a horizontally-scaled, stateless deployment MUST "
            "therefore make its idempotency record store visible to every instance handling "
            "that server's traffic",
        ),
        _c(
            "retention-window",
            "MUST",
            "Retention",
            "A server MUST retain enough state to answer a repeated key within a bounded window",
        ),
    ]
}


class OpenError(WireError):
    """The second caller's or the other instance's connection was refused."""


@dataclass
class Reply:
    """One `tools/call` answer, as the kit reads it."""

    raw: dict[str, Any]
    elapsed: float

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

    def same_result(self, other: Reply) -> bool:
        """Equal results, ignoring `_meta` (where a server may mark a replay)."""
        if self.result is None or other.result is None:
            return False
        mine = {k: v for k, v in self.result.items() if k != "_meta"}
        theirs = {k: v for k, v in other.result.items() if k != "_meta"}
        return mine == theirs

    def show(self) -> str:
        if self.error is not None:
            text = encode({k: self.error.get(k) for k in ("code", "message", "data")})
        else:
            text = encode(self.result)
        return text if len(text) <= 200 else text[:197] + "..."


WireOpener = Callable[[], Awaitable[Wire]]


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
    retention: float | None = None
    _opened: list[Wire] = field(default_factory=list)

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
        return Reply(raw, time.monotonic() - start)

    async def count(self, label: str, *, wire: Wire | None = None) -> int | None:
        return (await self.call(COUNT, {"label": label}, wire=wire)).executions


Outcome = tuple[Status, str]
Outcomes = dict[str, Outcome]


@dataclass(frozen=True)
class Scenario:
    name: str
    checks: tuple[str, ...]
    run: Callable[[Context], Awaitable[Outcomes]]
    eras: frozenset[str] = frozenset({LEGACY, MODERN})


def _verdict(ok: bool, good: str, bad: str) -> Outcome:
    return ("pass", good) if ok else ("fail", bad)


def _all(checks: tuple[str, ...], outcome: Outcome) -> Outcomes:
    return dict.fromkeys(checks, outcome)


async def _first(ctx: Context, checks: tuple[str, ...], reply: Reply) -> Outcomes | None:
    """When the first keyed call did not execute normally, nothing after it can be judged."""
    if reply.executions is None:
        return _all(checks, ("fail", f"the first keyed call did not answer: {reply.show()}"))
    return None


# -- capability ----------------------------------------------------------------------------------


def _capability(ctx: Context, check: str, where: str) -> Outcomes:
    tools = (ctx.wire.opened.get("capabilities") or {}).get("tools")
    value = tools.get("idempotency") if isinstance(tools, dict) else None
    if isinstance(value, dict):
        return {check: ("pass", f"capabilities.tools.idempotency = {encode(value)} in {where}")}
    if value is None:
        return {check: ("fail", f"capabilities.tools.idempotency missing from {where}")}
    return {check: ("fail", f"capabilities.tools.idempotency is {encode(value)}, not an object")}


async def capability_initialize(ctx: Context) -> Outcomes:
    version = ctx.wire.opened.get("protocolVersion")
    where = "the initialize result" + (f" (protocolVersion {version})" if version else "")
    return _capability(ctx, "sep-3182-capability-initialize", where)


async def capability_discover(ctx: Context) -> Outcomes:
    return _capability(ctx, "sep-3182-capability-discover", "the server/discover result")


# -- completed duplicates ------------------------------------------------------------------------


async def duplicate(ctx: Context) -> Outcomes:
    checks = ("sep-3182-duplicate-not-executed", "sep-3182-duplicate-returns-original")
    key, label = ctx.fresh("k"), ctx.fresh("dup")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    return {
        checks[0]: _verdict(
            count == 1,
            "the retry was not executed (1 execution)",
            f"the retry was executed: {count} executions of one keyed call",
        ),
        checks[1]: _verdict(
            again.same_result(first),
            "the retry got the original result",
            f"the retry got {again.show()}, the original was {first.show()}",
        ),
    }


async def error_replayed(ctx: Context) -> Outcomes:
    check = "sep-3182-error-replayed"
    key, label = ctx.fresh("k"), ctx.fresh("err")
    first = await ctx.call(FAIL, {"label": label}, key)
    if not first.is_error_result or first.executions is None:
        return {check: ("fail", f"{FAIL} did not answer an isError result: {first.show()}")}
    again = await ctx.call(FAIL, {"label": label}, key)
    count = await ctx.count(label)
    if count != 1:
        return {check: ("fail", f"the retry of an error was executed again ({count} executions)")}
    return {
        check: _verdict(
            again.same_result(first),
            "the isError result was replayed, not re-executed",
            f"the retry got {again.show()}, the original error was {first.show()}",
        )
    }


# -- in progress ---------------------------------------------------------------------------------


async def in_progress(ctx: Context) -> Outcomes:
    checks = (
        "sep-3182-in-progress-no-second-execution",
        "sep-3182-in-progress-not-blocked",
        "sep-3182-in-progress-rejected-immediately",
        "sep-3182-in-progress-error-data",
    )
    key, label, ms = ctx.fresh("k"), ctx.fresh("slow"), ctx.slow_ms
    args = {"label": label, "ms": ms}
    original = asyncio.ensure_future(ctx.call(RECORD_SLOW, args, key))
    try:
        # Wait until the original is executing (its count is 1), however loaded the target is.
        deadline = time.monotonic() + ms / 1000 + 10
        started = False
        while time.monotonic() < deadline and not original.done():
            if await ctx.count(label) == 1:
                started = True
                break
            await asyncio.sleep(0.01)
        if not started or original.done():
            why = f"the original slow call ({ms} ms) was not seen executing; raise --slow-ms"
            return _all(checks, ("fail", why))
        patience = ms / 1000 + 10
        try:
            dup = await asyncio.wait_for(ctx.call(RECORD_SLOW, args, key), patience)
        except asyncio.TimeoutError:
            dup = None
        original_running = not original.done()
        first = await original
    finally:
        if not original.done():
            original.cancel()
    count_after = await ctx.count(label)
    await ctx.call(RECORD_SLOW, args, key)  # a retry after completion: a replay, not a run
    count_final = await ctx.count(label)
    out: Outcomes = {}
    out[checks[0]] = _verdict(
        count_after == 1 and count_final == 1,
        "one execution for the original, the in-progress duplicate and a later retry",
        f"{count_after} executions while in progress, {count_final} after a later retry",
    )
    if dup is None:
        out[checks[1]] = ("fail", f"no answer to the duplicate within {patience:g} s")
        out[checks[2]] = out[checks[3]] = ("fail", "the duplicate was blocked")
        return out
    out[checks[1]] = ("pass", f"the duplicate was answered after {dup.elapsed * 1000:.0f} ms")
    if not dup.rejected:
        out[checks[2]] = ("fail", f"the duplicate was not refused: {dup.show()}")
    elif not original_running:
        out[checks[2]] = (
            "fail",
            f"the duplicate was answered only after the original finished ({ms} ms; a loaded "
            "target may need a larger --slow-ms)",
        )
    else:
        out[checks[2]] = ("pass", f"refused while the original ran ({dup.elapsed * 1000:.0f} ms)")
    data = dup.error_data()
    ok = data is not None and data.get("type") == "idempotency_key_in_progress"
    ok = ok and data is not None and data.get("idempotencyKey") == key
    out[checks[3]] = _verdict(
        ok,
        f"error.data = {encode(data)}",
        f"error.data does not name the case and key: {dup.show()}",
    )
    if first.executions is None:
        out[checks[0]] = ("fail", f"the original slow call failed: {first.show()}")
    return out


# -- conflicts -----------------------------------------------------------------------------------


def _conflict_data(reply: Reply, key: str) -> bool:
    data = reply.error_data()
    return (
        data is not None
        and data.get("type") == "idempotency_key_conflict"
        and data.get("idempotencyKey") == key
    )


async def conflicts(ctx: Context) -> Outcomes:
    """The key again with other arguments, and again with another tool name."""
    checks = (
        "sep-3182-conflict-rejected",
        "sep-3182-conflict-not-executed",
        "sep-3182-conflict-no-cached-result",
        "sep-3182-conflict-error-data",
        "sep-3182-conflict-tool-name",
    )
    key, label = ctx.fresh("k"), ctx.fresh("conflict")
    first = await ctx.call(RECORD, {"label": label, "payload": "first"}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    other = await ctx.call(RECORD, {"label": label, "payload": "second"}, key)
    count = await ctx.count(label)
    out: Outcomes = {
        checks[0]: _verdict(
            other.rejected, "refused: " + other.show(), f"not refused: {other.show()}"
        ),
        checks[1]: _verdict(
            count == 1,
            "the tool did not run with the new arguments",
            f"the tool ran with the new arguments ({count} executions)",
        ),
        checks[2]: _verdict(
            not other.same_result(first),
            "the original result was not returned",
            "the original result was returned for different arguments",
        ),
    }
    # Same arguments, another tool name.
    tool_key, tool_label = ctx.fresh("k"), ctx.fresh("tool")
    args = {"label": tool_label, "payload": "same"}
    mine = await ctx.call(RECORD, args, tool_key)
    theirs = await ctx.call(RECORD_SLOW, args, tool_key)
    tool_count = await ctx.count(tool_label)
    if mine.executions is None:
        out[checks[4]] = ("fail", f"the first keyed call did not answer: {mine.show()}")
    elif theirs.same_result(mine):
        out[checks[4]] = ("fail", f"{RECORD_SLOW} got {RECORD}'s recorded result for the same key")
    elif tool_count != 1:
        out[checks[4]] = ("fail", f"{RECORD_SLOW} was executed under {RECORD}'s key")
    else:
        out[checks[4]] = _verdict(
            theirs.rejected, "refused: " + theirs.show(), f"not refused: {theirs.show()}"
        )
    both = _conflict_data(other, key) and _conflict_data(theirs, tool_key)
    out[checks[3]] = _verdict(
        both,
        f"error.data = {encode(other.error_data())} (other arguments and another tool)",
        "error.data does not name the conflict and key: "
        f"{other.show() if not _conflict_data(other, key) else theirs.show()}",
    )
    return out


# -- equivalence ---------------------------------------------------------------------------------


async def _equivalent(ctx: Context, check: str, what: str, variants: list[str]) -> Outcomes:
    """The same logical arguments written as different JSON texts: one execution, one result."""
    key, label = ctx.fresh("k"), ctx.fresh("eq")
    texts = [v.replace("LABEL", label) for v in variants]
    first = await ctx.call(RECORD, Raw(texts[0]), key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    for text in texts[1:]:
        again = await ctx.call(RECORD, Raw(text), key)
        if not again.same_result(first):
            return {
                check: ("fail", f"{what}: {text} was not matched with {texts[0]}: {again.show()}")
            }
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1, f"{what}: one execution, one result", f"{what}: {count} executions"
        )
    }


async def equivalence_key_order(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-key-order",
        "key order",
        [
            '{"label": "LABEL", "payload": {"a": 1, "b": {"x": [1, 2], "y": null}}}',
            '{"payload": {"b": {"y": null, "x": [1, 2]}, "a": 1}, "label": "LABEL"}',
        ],
    )


async def equivalence_whitespace(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-whitespace",
        "whitespace",
        [
            '{"label":"LABEL","payload":{"a":[1,2,{"b":true}]}}',
            '{ \t"label" :  "LABEL" ,\t"payload" : { "a" : [ 1 ,2 , { "b" :true } ] } \t}',
        ],
    )


async def equivalence_escapes(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-escapes",
        "escapes",
        [
            '{"label": "LABEL", "payload": "caf\u00e9 \\"q\\" a/b \U0001f600"}',
            '{"label": "LABEL", "payload": "caf\\u00e9 \\u0022q\\" a\\/b \\ud83d\\ude00"}',
        ],
    )


async def equivalence_numbers(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-numbers",
        "numbers",
        [
            '{"label": "LABEL", "payload": {"n": 1, "m": [10, 2.5, -0.5]}}',
            '{"label": "LABEL", "payload": {"n": 1.0, "m": [1e1, 25e-1, -5E-1]}}',
            '{"label": "LABEL", "payload": {"n": 1e0, "m": [10.0, 2.50, -0.50]}}',
        ],
    )


async def no_normalization(ctx: Context) -> Outcomes:
    check = "sep-3182-no-unicode-normalization"
    key, label = ctx.fresh("k"), ctx.fresh("nfc")
    composed = unicodedata.normalize("NFC", "caf\u00e9")
    decomposed = unicodedata.normalize("NFD", composed)
    first = await ctx.call(RECORD, {"label": label, "payload": composed}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    other = await ctx.call(RECORD, {"label": label, "payload": decomposed}, key)
    count = await ctx.count(label)
    if other.same_result(first):
        return {check: ("fail", "NFD 'cafe\\u0301' was matched with NFC 'caf\\u00e9' (normalized)")}
    return {
        check: _verdict(
            other.rejected and count == 1,
            "NFC and NFD spellings are different arguments: a conflict",
            f"the NFD spelling was neither matched nor refused as a conflict: {other.show()}",
        )
    }


# -- unkeyed, scope, MRTR, shared store, retention ------------------------------------------------


async def unkeyed(ctx: Context) -> Outcomes:
    check = "sep-3182-unkeyed-unaffected"
    label = ctx.fresh("plain")
    first = await ctx.call(RECORD, {"label": label})
    second = await ctx.call(RECORD, {"label": label})
    return {
        check: _verdict(
            (first.executions, second.executions) == (1, 2),
            "two unkeyed calls, two executions",
            f"unkeyed calls answered {first.show()} then {second.show()}",
        )
    }


async def scope_per_caller(ctx: Context) -> Outcomes:
    check = "sep-3182-scope-per-caller"
    if ctx.second_caller is None:
        return {check: ("skip", ctx.second_caller_why_not)}
    other = await ctx.open(ctx.second_caller)
    key, label = ctx.fresh("k"), ctx.fresh("scope")
    mine = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), mine)) is not None:
        return bad
    theirs = await ctx.call(RECORD, {"label": label}, key, wire=other)
    mine_again = await ctx.call(RECORD, {"label": label}, key)
    if theirs.same_result(mine) or (theirs.error_data() or {}).get("type") in (
        "idempotency_key_conflict",
        "idempotency_key_in_progress",
    ):
        return {check: ("fail", f"the second caller was matched with the first: {theirs.show()}")}
    if theirs.executions != 2:
        return {check: ("fail", f"the second caller's call did not execute: {theirs.show()}")}
    return {
        check: _verdict(
            mine_again.same_result(mine),
            "one key, two callers: two executions; each caller replays its own result",
            f"the first caller's retry got {mine_again.show()}",
        )
    }


async def mrtr(ctx: Context) -> Outcomes:
    check = "sep-3182-mrtr-continuation-excluded"
    key, label = ctx.fresh("k"), ctx.fresh("mrtr")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    # `inputResponses` alone: a forged `requestState` would be refused by SDKs that sign it.
    continuation = {"inputResponses": {"sep3182": {"action": "accept", "content": {}}}}
    cont = await ctx.call(RECORD, {"label": label}, key, extra=continuation)
    retry = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    data = cont.error_data() or {}
    idempotency_error = str(data.get("type", "")).startswith("idempotency_key")
    if cont.same_result(first) or idempotency_error:
        return {
            check: (
                "fail",
                f"a continuation carrying the key was treated as a retry: {cont.show()}",
            )
        }
    how = "ran normally" if count == 2 else f"was answered by the server itself ({cont.show()})"
    return {
        check: _verdict(
            retry.same_result(first),
            f"the continuation {how}; the key's record is untouched",
            f"after the continuation, a retry got {retry.show()}",
        )
    }


async def shared_store(ctx: Context) -> Outcomes:
    check = "sep-3182-shared-store"
    if ctx.other_instance is None:
        return {check: ("skip", "give --also URL, a second instance of the same deployment")}
    other = await ctx.open(ctx.other_instance)
    probe = ctx.fresh("probe")
    await ctx.call(RECORD, {"label": probe})
    if await ctx.count(probe, wire=other) != 0:
        return {check: ("skip", "both URLs reach one process (they share its counters)")}
    key, label = ctx.fresh("k"), ctx.fresh("shared")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key, wire=other)
    executed_there = await ctx.count(label, wire=other)
    return {
        check: _verdict(
            executed_there == 0 and again.same_result(first),
            "the retry on the other instance got the original result, without executing",
            f"the other instance executed the retry ({executed_there} executions there)",
        )
    }


async def retention(ctx: Context) -> Outcomes:
    check = "sep-3182-retention-window"
    if ctx.retention is None:
        return {check: ("skip", "give --retention SECONDS, the window the server documents")}
    key, label = ctx.fresh("k"), ctx.fresh("ret")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    wait = max(0.0, min(ctx.retention * 0.5, ctx.retention - 1.0))
    await asyncio.sleep(wait)
    again = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1 and again.same_result(first),
            f"replayed after {wait:g} s of a documented {ctx.retention:g} s window",
            f"not replayed after {wait:g} s of a documented {ctx.retention:g} s window",
        )
    }


def _scenario(
    run: Callable[[Context], Awaitable[Outcomes]], *checks: str, eras: frozenset[str] | None = None
) -> Scenario:
    return Scenario(
        run.__name__,
        tuple(f"sep-3182-{c}" for c in checks),
        run,
        eras if eras is not None else frozenset({LEGACY, MODERN}),
    )


SCENARIOS: list[Scenario] = [
    _scenario(capability_initialize, "capability-initialize", eras=frozenset({LEGACY})),
    _scenario(capability_discover, "capability-discover", eras=frozenset({MODERN})),
    _scenario(duplicate, "duplicate-not-executed", "duplicate-returns-original"),
    _scenario(error_replayed, "error-replayed"),
    _scenario(
        in_progress,
        "in-progress-no-second-execution",
        "in-progress-not-blocked",
        "in-progress-rejected-immediately",
        "in-progress-error-data",
    ),
    _scenario(
        conflicts,
        "conflict-rejected",
        "conflict-not-executed",
        "conflict-no-cached-result",
        "conflict-error-data",
        "conflict-tool-name",
    ),
    _scenario(equivalence_key_order, "equivalence-key-order"),
    _scenario(equivalence_whitespace, "equivalence-whitespace"),
    _scenario(equivalence_escapes, "equivalence-escapes"),
    _scenario(equivalence_numbers, "equivalence-numbers"),
    _scenario(no_normalization, "no-unicode-normalization"),
    _scenario(unkeyed, "unkeyed-unaffected"),
    _scenario(scope_per_caller, "scope-per-caller"),
    _scenario(mrtr, "mrtr-continuation-excluded", eras=frozenset({MODERN})),
    _scenario(shared_store, "shared-store"),
    _scenario(retention, "retention-window"),
]
