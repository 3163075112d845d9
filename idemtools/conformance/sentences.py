"""What each check tests: its id, its level, the spec section and the sentence, verbatim.

A check is an id, a level, the spec section, and the sentence it tests, verbatim (` / ` joins two
sentences, `[...]` elides, as in the official conformance suite's traceability files). The level
is that sentence's keyword; where the sentence carries none, `reading` says why the check has the
level it has. `sep-3182.yaml` maps the SEP's ids (and every normative sentence no black box can
observe, with the reason) in the official conformance suite's traceability format; a test keeps
the two in step. The `mcp-base-*` checks test the base specification, not the SEP, and are
labelled so. `CHECKS` here holds the checks of the SEP's own scenarios (`sep/`) and of those that
need no fixture tool (`unfixtured`); the family modules (`families/`) add theirs to this table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .report import Level

__all__ = ["BASE_URL", "CHECKS", "PREREQUISITE", "SEP_URL", "CheckInfo"]


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
