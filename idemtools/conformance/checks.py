"""The checks: each tied to the spec sentence it tests, grouped in scenarios that share calls.

A check is an id, a level, the spec section, and the sentence it tests, verbatim (` / ` joins two
sentences, `[...]` elides, as in the official conformance suite's traceability files). The level
is that sentence's keyword; where the sentence carries none, `reading` says why the check has the
level it has. A scenario makes a few `tools/call`s against the fixture tools and decides several
checks from what it observed; every scenario uses fresh keys and labels, so repeated runs against
one long-lived server never see each other's records. `sep-3182.yaml` maps the SEP's ids (and
every normative sentence no black box can observe, with the reason) in the official conformance
suite's traceability format; a test keeps the two in step. The `mcp-base-*` checks test the base
specification, not the SEP, and are labelled so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import unicodedata
import uuid
from collections.abc import Awaitable, Callable, Mapping
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
from .defaults import default_differences, without_defaults
from .jsonvalues import raw_without, strict_equal
from .report import Level, Report, Result, Status
from .wire import LEGACY, MODERN, RAW_TEXT, HttpWire, Raw, Wire, WireError, encode

__all__ = [
    "CHECKS",
    "SCENARIOS",
    "CheckInfo",
    "Context",
    "OpenError",
    "Reply",
    "Scenario",
    "record",
]

SEP_URL = "https://github.com/modelcontextprotocol/modelcontextprotocol/pull/3182"
BASE_URL = "https://modelcontextprotocol.io/specification/2026-07-28/basic/index#error-codes"


@dataclass(frozen=True)
class CheckInfo:
    id: str
    level: Level
    section: str
    text: str
    reading: str = ""  # why this level, where `text` carries no keyword (or not this one)
    url: str = SEP_URL
    after: str | None = None  # the prerequisite: when it failed, this check's failure is blocked

    @property
    def base_spec(self) -> bool:
        return self.id.startswith("mcp-base-")


def _c(id_: str, level: Level, section: str, text: str, reading: str = "") -> CheckInfo:
    return CheckInfo(f"sep-3182-{id_}", level, section, text, reading)


_REPEAT = "Server behavior on a repeated key"
_EQ = "Request equivalence"
_SEC = "Security Implications"
_RETURN = "It MUST return the previously produced result"
_CONFLICT = (
    "If the new request's arguments differ from the arguments of the original call, the server "
    "MUST reject the request with an error indicating the key was previously used with "
    "different arguments."
)
_EQUIVALENT_DONE = (
    "If the new request's arguments are equivalent to the arguments of a completed original "
    'call (see "Request equivalence," below), the server MUST NOT execute the tool again.'
)
_CAPABILITY = (
    "This SEP introduces the `tools.idempotency` capability, discoverable via `server/discover` "
    "(SEP-2575), rather than treating `idempotencyKey` as a bare optional field with no "
    "negotiation"
)
_KEY = (
    "`idempotencyKey` is an opaque string, client-generated. / A server that supports this "
    "feature MUST treat two `tools/call` requests bearing the same `idempotencyKey` as the same "
    "logical operation, subject to the matching rules below, and MUST NOT execute the underlying "
    "tool a second time for a request it recognizes as a duplicate."
)
_KEY_READING = (
    "An opaque string is the same key only as the same string: keys that differ in case, by "
    "whitespace or in Unicode normalization form are other keys, other operations."
)
_ERROR_RECORD = (
    _CONFLICT[:-1] + " [...] and MUST NOT silently return the cached result from the original, "
    "differently-parameterized call."
)
CHECKS: dict[str, CheckInfo] = {
    c.id: c
    for c in [
        _c(
            "capability-initialize",
            "MUST",
            "Capability declaration",
            _CAPABILITY,
            "Every rule of the SEP applies to 'a server that declares this capability'; without "
            "it a client cannot rely on any of them. In 2025-11-25 capabilities are in the "
            "initialize result.",
        ),
        _c(
            "capability-discover",
            "MUST",
            "Capability declaration",
            _CAPABILITY,
            "Every rule of the SEP applies to 'a server that declares this capability'; without "
            "it a client cannot rely on any of them.",
        ),
        _c("duplicate-not-executed", "MUST", _REPEAT, _EQUIVALENT_DONE),
        _c("duplicate-returns-original", "MUST", _REPEAT, _RETURN),
        _c(
            "replay-json-identical",
            "MUST",
            _REPEAT,
            _RETURN,
            "The previously produced result is the same JSON value: `true`, `1` and `1.0` are "
            "different values in a result (the SEP's number rule is for comparing arguments). A "
            'member holding its schema default (`isError: false`, `resultType: "complete"`) '
            "present in one and absent in the other is the same result to every client: a note.",
        ),
        _c(
            "replay-json-equal",
            "SHOULD",
            _REPEAT,
            _RETURN,
            "SHOULD: the replay is the original's JSON value exactly, with no allowance for a "
            "member that holds its schema default in one and is absent in the other (a client "
            "that compares answers, or a cache keyed by them, sees that difference).",
        ),
        _c(
            "error-replayed",
            "MUST",
            _REPEAT,
            _RETURN + " — whether that result was a successful response or an error response",
        ),
        _c(
            "error-replayed-jsonrpc",
            "MUST",
            _REPEAT,
            _RETURN + " — whether that result was a successful response or an error response",
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
            "and MUST NOT block the duplicate request indefinitely waiting for the original to "
            "finish.",
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
            'specific failure mode (for example `{"type": "idempotency_key_in_progress", '
            '"idempotencyKey": "<the key>"}`)',
        ),
        _c(
            "in-progress-original-replayed",
            "MUST",
            _REPEAT,
            "[...] allowing the client to retry after a short delay rather than either "
            "duplicating execution or hanging. / " + _RETURN,
        ),
        _c("conflict-rejected", "MUST", _REPEAT, _CONFLICT),
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
            '`{"type": "idempotency_key_conflict", "idempotencyKey": "<the key>"}`',
        ),
        _c("conflict-error-record", "MUST", _REPEAT, _ERROR_RECORD),
        _c("conflict-jsonrpc-error-record", "MUST", _REPEAT, _ERROR_RECORD),
        _c(
            "conflict-tool-name",
            "MUST",
            _EQ,
            "Two requests bearing the same `idempotencyKey` are equivalent if they specify the "
            "same tool name and equivalent arguments as parsed JSON values. / " + _CONFLICT,
            "Another tool name is not an equivalent request: the conflict rule applies.",
        ),
        _c(
            "equivalence-meta-ignored",
            "MUST",
            _EQ,
            "Equivalence is determined solely by tool name and argument values / "
            + _EQUIVALENT_DONE,
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
            "whitespace, key ordering, or other serialization detail that does not change the "
            "parsed value",
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
            "already resolves; two strings that are distinct after parsing remain distinct for "
            "this comparison. / " + _CONFLICT,
        ),
        _c("key-case-sensitive", "MUST", "Request format", _KEY, _KEY_READING),
        _c("key-whitespace-significant", "MUST", "Request format", _KEY, _KEY_READING),
        _c("key-unicode-exact", "MUST", "Request format", _KEY, _KEY_READING),
        _c(
            "unkeyed-unaffected",
            "MUST",
            "Backward Compatibility",
            "There is no scenario in which adopting this SEP requires an existing client or "
            "server to change behavior it currently exhibits; the only behavior change is "
            "opt-in, for parties that choose to send and honor the new field.",
            "A call without a key is the behaviour before the SEP: every call executes.",
        ),
        _c(
            "scope-per-caller",
            "MUST",
            _SEC,
            "Servers MUST scope their idempotency records to whatever authorization boundary "
            "already governs access to the underlying tool call [...] so that a key is only ever "
            "matched against a prior request from the same authorized caller.",
        ),
        _c(
            "scope-across-connections",
            "SHOULD",
            _SEC,
            "When a response is lost after a request has already executed — a network timeout, "
            'a dropped connection, a proxy failure — the client cannot distinguish "never '
            'arrived" from "arrived and executed, but the response was lost," and has no '
            "standard way to retry safely.",
            "SHOULD, not MUST: the SEP lets a record be scoped to 'an OAuth-authenticated "
            "session', but the retry it exists for comes after a dropped connection.",
        ),
        _c(
            "mrtr-continuation-excluded",
            "SHOULD",
            "Relationship to the 2026-07-28 stateless core and MRTR",
            "This is not a retry under this SEP's terms, and implementations should not conflate "
            "the two. / This SEP does not define idempotency semantics for `tools/call` requests "
            "carrying MRTR continuation fields such as `requestState` and `inputResponses`; such "
            "requests are intentionally outside the scope of this proposal",
            "The SEP's 'should' is lower-case; read as SHOULD.",
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
        _c(
            "replay-raw-identical",
            "INFO",
            _REPEAT,
            _RETURN,
            "INFO: byte identity of the replay outside `_meta` is idemtools' own promise, not "
            "the SEP's (it compares results as JSON values).",
        ),
        _c(
            "replay-meta-identical",
            "INFO",
            _REPEAT,
            _RETURN,
            "INFO: a server may mark a replay in `_meta`; the SEP says nothing of `_meta`.",
        ),
        _c(
            "tool-replay-returns-original",
            "MUST",
            _REPEAT,
            _RETURN,
            "Decided on the tool the operator names (`--tool`), where the fixture tools are "
            "absent: the kit cannot count its executions, only compare the answers.",
        ),
        _c(
            "tool-replay-json-equal",
            "SHOULD",
            _REPEAT,
            _RETURN,
            "SHOULD, as `replay-json-equal`: exactly the original's JSON value, no allowance "
            "for a member holding its schema default.",
        ),
        _c(
            "malformed-key-refused",
            "SHOULD",
            "Request format",
            "`idempotencyKey` is an opaque string, client-generated.",
            "SHOULD: a key that is not a string is no key; a server that runs the call anyway "
            "gives the client who sent it no protection and no word of it. The base protocol's "
            "answer to malformed params is a JSON-RPC error.",
        ),
        CheckInfo(
            "mcp-base-error-object",
            "MUST",
            "JSON-RPC 2.0, Error object",
            "code: A Number that indicates the error type that occurred. This MUST be an "
            "integer. / message: A String providing a short description of the error.",
            "Every error answer of the run: a client reads `code` and `message` before "
            "anything else, and `error.data.type` (when present, a string) to tell refusals "
            "apart.",
            "https://www.jsonrpc.org/specification#error_object",
        ),
        CheckInfo(
            "mcp-base-error-codes-reserved",
            "MUST",
            "MCP base specification 2026-07-28, Error Codes",
            "Implementations MUST NOT emit any code from this sub-range that is not defined by "
            "this specification and MUST use defined codes only with their specified meanings.",
            "The sub-range is -32020..-32099; the specification defines -32020, -32021, -32022.",
            BASE_URL,
        ),
        CheckInfo(
            "mcp-base-error-codes-legacy",
            "INFO",
            "MCP base specification 2026-07-28, Error Codes",
            "New codes MUST NOT be allocated in this sub-range, and new implementations SHOULD "
            "NOT use codes from this sub-range at all.",
            "INFO: the sub-range is -32000..-32019, and the SDKs answer in it themselves (mcp "
            "2.3: -32000 'Connection closed' at shutdown), so a black box cannot tell whose "
            "code it sees.",
            BASE_URL,
        ),
    ]
}


# Every check that needs a keyed retry to be recognised rests on sep-3182-duplicate-not-executed:
# when a server runs every keyed retry again (it ignores the key), their failures are that one
# bug, reported once (the others `blocked` by it).
_INDEPENDENT = {
    "sep-3182-capability-initialize",
    "sep-3182-capability-discover",
    "sep-3182-duplicate-not-executed",
    "sep-3182-in-progress-not-blocked",
    "sep-3182-unkeyed-unaffected",
    "mcp-base-error-codes-reserved",
    "mcp-base-error-codes-legacy",
    "mcp-base-error-object",
    "sep-3182-malformed-key-refused",
    "sep-3182-tool-replay-returns-original",
    "sep-3182-tool-replay-json-equal",
}
PREREQUISITE = "sep-3182-duplicate-not-executed"
CHECKS = {
    k: c if k in _INDEPENDENT else dataclasses.replace(c, after=PREREQUISITE)
    for k, c in CHECKS.items()
}


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


# -- capability ----------------------------------------------------------------------------------


def _capability(ctx: Context, check: str, where: str) -> Outcomes:
    method = "server/discover" if ctx.era == MODERN else "initialize"
    ctx.transcript.append({"request": method, "answer": _cut_json(ctx.wire.opened)})
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
        checks[1]: _noted(
            _verdict(
                again.same_result(first),
                "the retry got the original result",
                f"the retry got {again.show()}, the original was {first.show()}",
            ),
            again.default_note(first),
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
        "sep-3182-in-progress-original-replayed",
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
    retry = await ctx.call(RECORD_SLOW, args, key)  # after completion: a replay, not a run
    count_final = await ctx.count(label)
    out: Outcomes = {}
    out[checks[0]] = _verdict(
        count_after == 1 and count_final == 1,
        "one execution for the original, the in-progress duplicate and a later retry",
        f"{count_after} executions while in progress, {count_final} after a later retry",
    )
    if first.executions is None:
        out[checks[4]] = ("fail", f"the original slow call failed: {first.show()}")
    elif retry.same_result(first):
        out[checks[4]] = ("pass", "the retry after completion got the original result")
    elif retry.rejected:
        out[checks[4]] = (
            "fail",
            "the retry after the original completed was refused (the refused duplicate left the "
            f"record in progress or corrupt): {retry.show()}; the original was {first.show()}",
        )
    else:
        out[checks[4]] = (
            "fail",
            f"the retry after completion got {retry.show()}, not the original result "
            f"{first.show()}",
        )
    if dup is None:
        out[checks[1]] = ("fail", f"no answer to the duplicate within {patience:g} s")
        why = "the duplicate was blocked"
        out[checks[2]] = out[checks[3]] = ("fail", why, {"blocked_by": checks[1]})
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
        if isinstance(ctx.wire, HttpWire):
            return {check: ("skip", ctx.second_caller_why_not, {"enable": "--second-header"})}
        return {check: ("skip", ctx.second_caller_why_not)}  # stdio: not applicable
    other = await ctx.open(ctx.second_caller)
    key, label = ctx.fresh("k"), ctx.fresh("scope")
    mine = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), mine)) is not None:
        return bad
    theirs = await ctx.call(RECORD, {"label": label}, key, wire=other)
    mine_again = await ctx.call(RECORD, {"label": label}, key)
    if theirs.same_result(mine) or theirs.error_type() in (
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
    idempotency_error = (cont.error_type() or "").startswith("idempotency_key")
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
        if not isinstance(ctx.wire, HttpWire):  # nothing would run it: not counted as not run
            return {check: ("skip", "stdio: one process, no second instance to share a store")}
        why = "give --also URL, a second instance of the same deployment"
        return {check: ("skip", why, {"enable": "--also URL"})}
    other = await ctx.open(ctx.other_instance)
    probe = ctx.fresh("probe")
    await ctx.call(RECORD, {"label": probe})
    if await ctx.count(probe, wire=other) != 0:
        why = "both URLs reach one process (they share its counters)"
        return {check: ("skip", why, {"enable": "--also URL of another instance"})}
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
        why = "give --retention SECONDS, the window the server documents"
        return {check: ("skip", why, {"enable": "--retention SECONDS"})}
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


# -- JSON-RPC errors and error records ------------------------------------------------------------

_NO_THROW = (
    f"the target does not list the {THROW} fixture tool (docs/conformance.md, the fixture "
    "contract; mcp 1.x FastMCP cannot answer a JSON-RPC error from a tool and does not list it)"
)


async def jsonrpc_error(ctx: Context) -> Outcomes:
    """`sep3182_throw` answers a JSON-RPC error: its retry is a replay; other arguments under
    its key are a conflict, not the recorded error."""
    checks = ("sep-3182-error-replayed-jsonrpc", "sep-3182-conflict-jsonrpc-error-record")
    if not await ctx.has_tool(THROW):
        return _all(checks, ("blocked", _NO_THROW, {"enable": f"the {THROW} fixture tool"}))
    key, label = ctx.fresh("k"), ctx.fresh("throw")
    first = await ctx.call(THROW, {"label": label, "payload": "first"}, key)
    if first.error is None or throw_count(first.error) != 1:
        why = f"{THROW} did not answer a JSON-RPC error with data.executions 1: {first.show()}"
        return {checks[0]: ("fail", why), checks[1]: ("fail", why, {"blocked_by": checks[0]})}
    again = await ctx.call(THROW, {"label": label, "payload": "first"}, key)
    count = await ctx.count(label)
    out: Outcomes = {}
    if count != 1:
        out[checks[0]] = (
            "fail",
            f"the retry of a JSON-RPC error was executed again ({count} executions)",
        )
    elif not again.same_error(first):
        out[checks[0]] = (
            "fail",
            f"the retry got {again.show()}, the original JSON-RPC error was {first.show()}",
        )
    else:
        older = throw_uses_old_field(first.error)
        out[checks[0]] = _noted(
            ("pass", "the JSON-RPC error was replayed, not re-executed"),
            f"{THROW} answers data.count, the contract's older name for data.executions: accepted"
            if older
            else None,
        )
    other = await ctx.call(THROW, {"label": label, "payload": "second"}, key)
    count_other = await ctx.count(label)
    if count_other != count:
        out[checks[1]] = (
            "fail",
            f"other arguments under a JSON-RPC error record were executed ({count_other} "
            "executions)",
        )
    elif other.same_error(first):
        out[checks[1]] = (
            "fail",
            f"the recorded JSON-RPC error was replayed for other arguments: {other.show()}",
        )
    else:
        out[checks[1]] = _verdict(
            other.rejected,
            f"other arguments were refused: {other.show()}",
            f"other arguments were not refused: {other.show()}",
        )
    return out


async def conflict_error_record(ctx: Context) -> Outcomes:
    check = "sep-3182-conflict-error-record"
    key, label = ctx.fresh("k"), ctx.fresh("errconflict")
    first = await ctx.call(FAIL, {"label": label, "payload": "first"}, key)
    if not first.is_error_result or first.executions is None:
        return {check: ("fail", f"{FAIL} did not answer an isError result: {first.show()}")}
    other = await ctx.call(FAIL, {"label": label, "payload": "second"}, key)
    count = await ctx.count(label)
    if count != 1:
        why = f"other arguments under an isError record were executed ({count} executions)"
        return {check: ("fail", why)}
    if other.same_result(first):
        return {
            check: (
                "fail",
                f"the recorded isError result was replayed for other arguments: {other.show()}",
            )
        }
    return {
        check: _verdict(
            other.rejected,
            f"other arguments were refused: {other.show()}",
            f"other arguments were not refused: {other.show()}",
        )
    }


# -- what is not part of equivalence: _meta; what is: the key, as written --------------------------


async def equivalence_meta(ctx: Context) -> Outcomes:
    """A retry that differs only in `_meta` (a fresh progressToken, a vendor key) is a replay."""
    check = "sep-3182-equivalence-meta-ignored"
    key, label = ctx.fresh("k"), ctx.fresh("meta")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    metas = [
        {"progressToken": ctx.fresh("progress")},
        {"progressToken": 7, "com.example/trace": ctx.fresh("trace")},
    ]
    for meta in metas:
        again = await ctx.call(RECORD, {"label": label}, key, extra={"_meta": meta})
        if not again.same_result(first):
            return {
                check: (
                    "fail",
                    f"a retry differing only in _meta {encode(meta)} was not a replay: "
                    f"{again.show()} (a real client's retry with a fresh progressToken would "
                    "be refused or run again)",
                )
            }
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1,
            "retries differing only in _meta (progressToken, a vendor key) were replays",
            f"retries differing only in _meta were executed ({count} executions)",
        )
    }


async def _distinct_keys(ctx: Context, check: str, what: str, one: str, two: str) -> Outcomes:
    """Two keys that differ only as `what`: two operations, each replaying its own result."""
    label = ctx.fresh("key")
    first = await ctx.call(RECORD, {"label": label}, one)
    if (restricted := await _restricts(ctx, check, label, one, first, 0)) is not None:
        return restricted
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    second = await ctx.call(RECORD, {"label": label}, two)
    if (restricted := await _restricts(ctx, check, label, two, second, 1)) is not None:
        return restricted
    if second.executions != 2:
        sent = f"key {json.dumps(one)}, then key {json.dumps(two)} ({what}), same arguments"
        if second.same_result(first):
            seen = f"the second got the first key's result replayed: {second.show()}"
        elif second.rejected:
            seen = f"the second was refused, as if it were the first key: {second.show()}"
        else:
            seen = f"the second did not run as a call of its own: {second.show()}"
        return {check: ("fail", f"sent {sent}; {seen}")}
    again_one = await ctx.call(RECORD, {"label": label}, one)
    again_two = await ctx.call(RECORD, {"label": label}, two)
    ok = again_one.same_result(first) and again_two.same_result(second)
    return {
        check: _verdict(
            ok and await ctx.count(label) == 2,
            f"keys differing only by {what} are two operations, each replaying its own",
            f"after two keys differing by {what}, retries got {again_one.show()} and "
            f"{again_two.show()}",
        )
    }


async def _restricts(
    ctx: Context, check: str, label: str, key: str, reply: Reply, ran_before: int
) -> Outcomes | None:
    """The SEP fixes no key format: a server may refuse a key it will not store (spaces,
    non-ASCII) with `idempotency_key_invalid`, running nothing. Then there is nothing to
    compare: a skip, never a failure. Refused but run, it is no refusal: the check goes on."""
    if reply.error_type() != "idempotency_key_invalid":
        return None
    if await ctx.count(label) != ran_before:
        return None
    return {
        check: (
            "skip",
            f"the server restricts keys: it refused key {json.dumps(key)} with "
            "idempotency_key_invalid and ran nothing (the SEP fixes no key format)",
        )
    }


async def key_case(ctx: Context) -> Outcomes:
    base = ctx.fresh("KeyCase")
    return await _distinct_keys(ctx, "sep-3182-key-case-sensitive", "case", base, base.swapcase())


async def key_whitespace(ctx: Context) -> Outcomes:
    base = ctx.fresh("k")
    return await _distinct_keys(
        ctx, "sep-3182-key-whitespace-significant", "trailing whitespace", base, base + " "
    )


async def key_unicode(ctx: Context) -> Outcomes:
    base = ctx.fresh("k")
    nfc = base + unicodedata.normalize("NFC", "-caf\u00e9")
    nfd = base + unicodedata.normalize("NFD", "-caf\u00e9")
    return await _distinct_keys(
        ctx, "sep-3182-key-unicode-exact", "NFC vs NFD of the same text", nfc, nfd
    )


# -- the replay itself, as JSON and as text -------------------------------------------------------


async def replay_identity(ctx: Context) -> Outcomes:
    checks = (
        "sep-3182-replay-json-identical",
        "sep-3182-replay-raw-identical",
        "sep-3182-replay-meta-identical",
        "sep-3182-replay-json-equal",
    )
    key, label = ctx.fresh("k"), ctx.fresh("ident")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key)
    return replay_outcomes(checks, first, again)


def replay_outcomes(checks: tuple[str, ...], first: Reply, again: Reply) -> Outcomes:
    """The replay checks (JSON value with and without the default-member allowance, raw text,
    `_meta`) for one original answer and its retry."""
    if again.result is None or first.result is None:
        why = f"the retry was not a result: {again.show()} (the original: {first.show()})"
        return {
            c: ("fail", why, {"blocked_by": checks[0]} if c != checks[0] else {}) for c in checks
        }
    mine = {k: v for k, v in first.result.items() if k != "_meta"}
    theirs = {k: v for k, v in again.result.items() if k != "_meta"}
    out: Outcomes = {
        checks[0]: _noted(
            _verdict(
                strict_equal(without_defaults(mine), without_defaults(theirs)),
                "the replay is the same JSON value as the original (types included), _meta aside",
                f"the replay is another JSON value: {_first_difference(mine, theirs)}",
            ),
            again.default_note(first),
        ),
        checks[3]: _verdict(
            strict_equal(mine, theirs),
            "the replay is exactly the original's JSON value, _meta aside",
            f"the replay is not exactly the original: {_first_difference(mine, theirs)}",
        ),
    }
    if first.text is None or again.text is None:
        out[checks[1]] = ("skip", "the wire kept no raw text of the answers")
    else:
        raw_one = raw_without(first.text, "result", "_meta")
        raw_two = raw_without(again.text, "result", "_meta")
        out[checks[1]] = _verdict(
            raw_one is not None and raw_one == raw_two,
            "the replay's raw text outside _meta is the original's, byte for byte",
            f"the replay's raw text outside _meta differs: {_cut(str(raw_two))[:200]} "
            f"vs the original {_cut(str(raw_one))[:200]}",
        )
    meta_one, meta_two = first.result.get("_meta"), again.result.get("_meta")
    out[checks[2]] = _verdict(
        strict_equal(meta_one, meta_two),
        "the replay's _meta is the original's",
        f"the replay's _meta is {encode(meta_two)}, the original's {encode(meta_one)}",
    )
    return out


def _first_difference(a: Any, b: Any, path: str = "result") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k} is {'missing' if k not in b else 'new'} in the replay"
            if not strict_equal(a[k], b[k]):
                return _first_difference(a[k], b[k], f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not strict_equal(x, y):
                return _first_difference(x, y, f"{path}[{i}]")
    was, now = f"{encode(a)[:100]} ({_json_type(a)})", f"{encode(b)[:100]} ({_json_type(b)})"
    return f"{path} was {was}, replayed {now}"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "real"
    return {str: "string", type(None): "null", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


# -- the same caller on a new connection ----------------------------------------------------------


async def scope_across_connections(ctx: Context) -> Outcomes:
    check = "sep-3182-scope-across-connections"
    if ctx.reconnect is None:
        return {check: ("skip", "stdio: a new connection is a new process; nothing to check")}
    key, label = ctx.fresh("k"), ctx.fresh("reconnect")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    other = await ctx.open(ctx.reconnect)
    again = await ctx.call(RECORD, {"label": label}, key, wire=other)
    count = await ctx.count(label)
    where = "a new connection" + (" (a new session)" if ctx.era == LEGACY else "")
    if count == 1 and again.same_result(first):
        return {check: ("pass", f"the same credentials on {where} got the replay")}
    return {
        check: (
            "fail",
            f"the same credentials on {where} did not get the replay ({count} executions; "
            f"{again.show()}): per-session scoping is allowed by the SEP ('an "
            "OAuth-authenticated session') but makes retries after a reconnect unsafe",
        )
    }


# -- base specification: error codes --------------------------------------------------------------

DEFINED_RESERVED = frozenset({-32020, -32021, -32022})  # 2026-07-28: HeaderMismatch, ...


def _codes(ctx: Context, low: int, high: int, allowed: frozenset[int]) -> list[str]:
    seen: dict[int, str] = {}
    for error, sent in ctx.errors:
        code = error.get("code")
        if type(code) is int and low <= code <= high and code not in allowed:
            data = error.get("data")
            kind = data.get("type") if isinstance(data, dict) else None
            try:
                name = json.loads(sent).get("name")
            except (ValueError, AttributeError):
                name = None
            seen.setdefault(
                code,
                f"{code} ({error.get('message')!r}"
                + (f", data.type {kind}" if kind else "")
                + (f", answering {name}" if name else "")
                + ")",
            )
    return [seen[c] for c in sorted(seen)]


async def base_error_codes(ctx: Context) -> Outcomes:
    """Every JSON-RPC error this era's checks received, against the base spec's ranges."""
    checks = ("mcp-base-error-codes-reserved", "mcp-base-error-codes-legacy")
    total = len(ctx.errors)
    for error, sent in ctx.errors:  # the evidence: every error answer and what it answered
        ctx.transcript.append({"request": _cut(sent), "answer": _cut_json({"error": error})})
    reserved = _codes(ctx, -32099, -32020, DEFINED_RESERVED)
    legacy = _codes(ctx, -32019, -32000, frozenset())
    return {
        checks[0]: _verdict(
            not reserved,
            f"no undefined code in -32020..-32099 among {total} error answers",
            "codes in -32020..-32099 that the specification does not define: "
            + "; ".join(reserved),
        ),
        checks[1]: _verdict(
            not legacy,
            f"no code in -32000..-32019 among {total} error answers",
            "codes in the legacy sub-range -32000..-32019: " + "; ".join(legacy),
        ),
    }


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


SCENARIOS: list[Scenario] = [
    _scenario(
        capability_initialize, "capability-initialize", eras=frozenset({LEGACY}), fixtures=()
    ),
    _scenario(capability_discover, "capability-discover", eras=frozenset({MODERN}), fixtures=()),
    _scenario(duplicate, "duplicate-not-executed", "duplicate-returns-original"),
    _scenario(
        replay_identity,
        "replay-json-identical",
        "replay-raw-identical",
        "replay-meta-identical",
        "replay-json-equal",
    ),
    _scenario(error_replayed, "error-replayed"),
    _scenario(
        jsonrpc_error,
        "error-replayed-jsonrpc",
        "conflict-jsonrpc-error-record",
        fixtures=(*FIXTURE_TOOLS, THROW),
    ),
    _scenario(
        in_progress,
        "in-progress-no-second-execution",
        "in-progress-not-blocked",
        "in-progress-rejected-immediately",
        "in-progress-error-data",
        "in-progress-original-replayed",
    ),
    _scenario(
        conflicts,
        "conflict-rejected",
        "conflict-not-executed",
        "conflict-no-cached-result",
        "conflict-error-data",
        "conflict-tool-name",
    ),
    _scenario(conflict_error_record, "conflict-error-record"),
    _scenario(equivalence_meta, "equivalence-meta-ignored"),
    _scenario(equivalence_key_order, "equivalence-key-order"),
    _scenario(equivalence_whitespace, "equivalence-whitespace"),
    _scenario(equivalence_escapes, "equivalence-escapes"),
    _scenario(equivalence_numbers, "equivalence-numbers"),
    _scenario(no_normalization, "no-unicode-normalization"),
    _scenario(key_case, "key-case-sensitive"),
    _scenario(key_whitespace, "key-whitespace-significant"),
    _scenario(key_unicode, "key-unicode-exact"),
    _scenario(unkeyed, "unkeyed-unaffected"),
    _scenario(scope_per_caller, "scope-per-caller"),
    _scenario(scope_across_connections, "scope-across-connections"),
    _scenario(mrtr, "mrtr-continuation-excluded", eras=frozenset({MODERN})),
    _scenario(shared_store, "shared-store"),
    _scenario(retention, "retention-window"),
    # Last: it reads every error answer the era's checks received.
    _scenario(
        base_error_codes,
        "mcp-base-error-codes-reserved",
        "mcp-base-error-codes-legacy",
        eras=frozenset({MODERN}),
        fixtures=(),
    ),
]
