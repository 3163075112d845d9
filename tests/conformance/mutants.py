"""The kit's mutant catalogue: one bug each in the reference server, and the check that must fail.

A conformance kit is worth exactly the bugs it catches. Each `Mutant` switches on one bug in
`reference_server.py` (`--mutant NAME`) and names the check id(s) that must then report `fail`:
one mutant per blind spot the kit once had and one per check family the kit had before it. Only the
check a bug breaks *first* is named, so that a dependant the kit reports as `blocked` by it is
no surprise. `Variant`s are not bugs: conforming choices the SEP leaves open, which the kit must
pass.

No idemtools import here either: the catalogue is data, read by test_mutants.py.
"""

from __future__ import annotations

from dataclasses import dataclass

LEGACY, MODERN = "2025-11-25", "2026-07-28"
BOTH = (LEGACY, MODERN)

# The check ids added for those blind spots. A mutant that needs one of
# them is skipped until `idemtools.conformance.checks.CHECKS` has it, then it is required.
NEW_IDS = frozenset(
    {
        "sep-3182-error-replayed-jsonrpc",
        "sep-3182-in-progress-original-replayed",
        "sep-3182-conflict-error-record",
        "sep-3182-conflict-jsonrpc-error-record",
        "sep-3182-equivalence-meta-ignored",
        "sep-3182-key-case-sensitive",
        "sep-3182-key-whitespace-significant",
        "sep-3182-key-unicode-exact",
        "sep-3182-replay-json-identical",
        "sep-3182-replay-raw-identical",
        "sep-3182-replay-meta-identical",
        "sep-3182-scope-across-connections",
        "mcp-base-error-codes-reserved",
        "mcp-base-error-codes-legacy",
    }
)


@dataclass(frozen=True)
class Mutant:
    """One bug. `eras`: the protocol eras the kit checks it in (each costs a connection and a
    full pass); `http`: over streamable HTTP, two instances and two callers (else stdio);
    `retention`: the run documents a short window (`--retention`), which the kit waits out."""

    name: str
    origin: str  # "blind spot N" or "family: ..." (the checks the kit had)
    bug: str
    expect: tuple[str, ...]
    eras: tuple[str, ...] = (MODERN,)
    http: bool = False
    retention: bool = False


def _ids(*names: str) -> tuple[str, ...]:
    return tuple(n if n.startswith("mcp-") else f"sep-3182-{n}" for n in names)


def _m(name: str, origin: str, bug: str, *expect: str, **how: object) -> Mutant:
    return Mutant(name, origin, bug, _ids(*expect), **how)  # type: ignore[arg-type]


MUTANTS: tuple[Mutant, ...] = (
    # -- the blind spots
    _m(
        "throw-reexecuted",
        "blind spot 1",
        "a JSON-RPC error outcome is not recorded: every retry re-runs the tool",
        "error-replayed-jsonrpc",
    ),
    _m(
        "in-progress-corrupts",
        "blind spot 2",
        "the refused in-progress duplicate takes the claim over: the original's outcome is "
        "dropped and the key stays in progress forever",
        "in-progress-original-replayed",
    ),
    _m(
        "error-record-any-args",
        "blind spot 3",
        "an isError record is replayed for any arguments",
        "conflict-error-record",
    ),
    _m(
        "jsonrpc-error-record-any-args",
        "blind spot 3",
        "a JSON-RPC error record is replayed for any arguments",
        "conflict-jsonrpc-error-record",
    ),
    _m(
        "meta-compared",
        "blind spot 4",
        "params._meta is part of the comparison (a fresh progressToken is a conflict)",
        "equivalence-meta-ignored",
    ),
    _m(
        "key-casefold",
        "blind spot 5",
        "keys are compared case-insensitively",
        "key-case-sensitive",
    ),
    _m(
        "key-trimmed",
        "blind spot 5",
        "keys are trimmed before lookup",
        "key-whitespace-significant",
    ),
    _m(
        "key-nfc",
        "blind spot 5",
        "keys are NFC-normalised before lookup",
        "key-unicode-exact",
    ),
    _m(
        "replay-number-type",
        "blind spot 6",
        "a replay turns integers into floats (1 -> 1.0)",
        "replay-json-identical",
    ),
    _m(
        "replay-bool-type",
        "blind spot 6",
        "a replay turns booleans into integers (false -> 0)",
        "replay-json-identical",
    ),
    _m(
        "replay-reserialised",
        "blind spot 6",
        "a replay is re-serialised (other separators, sorted members): same value, other text",
        "replay-raw-identical",
    ),
    _m(
        "replay-meta-timestamp",
        "blind spot 6",
        "a replay adds a fresh _meta timestamp",
        "replay-meta-identical",
    ),
    _m(
        "scope-per-connection",
        "blind spot 7",
        "records are scoped per session (2025-11-25) or per TCP connection (2026-07-28)",
        "scope-across-connections",
        eras=BOTH,
        http=True,
    ),
    _m(
        "reserved-code",
        "blind spot 8",
        "the conflict refusal uses -32077, a code the 2026-07-28 spec reserves and does not define",
        "mcp-base-error-codes-reserved",
    ),
    _m(
        "legacy-code",
        "blind spot 8",
        "the in-progress refusal uses -32001, in the legacy -32000..-32019 range",
        "mcp-base-error-codes-legacy",
        eras=BOTH,
    ),
    # -- the check families the kit had
    _m(
        "no-capability",
        "family: capability",
        "tools.idempotency is not advertised",
        "capability-initialize",
        "capability-discover",
        eras=BOTH,
    ),
    _m(
        "key-ignored",
        "family: key ignored",
        "idempotencyKey is ignored: every call runs",
        "duplicate-not-executed",
    ),
    _m(
        "replay-reexecutes",
        "family: replay",
        "a completed duplicate runs the tool again (and then answers the recorded result)",
        "duplicate-not-executed",
    ),
    _m(
        "replay-wrong-result",
        "family: replay",
        "a completed duplicate is answered with a generic 'already done', not the recorded result",
        "duplicate-returns-original",
    ),
    _m(
        "errors-not-replayed",
        "family: errors replayed",
        "an isError result is not recorded: the retry runs again",
        "error-replayed",
    ),
    _m(
        "conflict-not-detected",
        "family: conflict",
        "other arguments under a used key get the recorded result",
        "conflict-rejected",
    ),
    _m(
        "conflict-executes",
        "family: conflict",
        "other arguments under a used key run the tool, then get the conflict error",
        "conflict-not-executed",
    ),
    _m(
        "conflict-ignores-tool-name",
        "family: conflict",
        "the comparison leaves out the tool name",
        "conflict-tool-name",
    ),
    _m(
        "conflict-no-data-type",
        "family: conflict",
        "the conflict refusal's error.data has the key but no type",
        "conflict-error-data",
    ),
    _m(
        "equiv-raw-text",
        "family: equivalence",
        "the raw arguments text is compared",
        "equivalence-key-order",
        "equivalence-whitespace",
        "equivalence-escapes",
        "equivalence-numbers",
    ),
    _m(
        "equiv-key-order",
        "family: equivalence",
        "object members are compared in the order written",
        "equivalence-key-order",
    ),
    _m(
        "equiv-whitespace",
        "family: equivalence",
        "whitespace between tokens is compared",
        "equivalence-whitespace",
    ),
    _m(
        "equiv-escapes",
        "family: equivalence",
        "string literals are compared as written (escapes not resolved)",
        "equivalence-escapes",
    ),
    _m(
        "equiv-numbers",
        "family: equivalence",
        "numbers are compared with their type (1 != 1.0)",
        "equivalence-numbers",
    ),
    _m(
        "unicode-normalised",
        "family: equivalence",
        "strings in the arguments are NFC-normalised before comparing",
        "no-unicode-normalization",
    ),
    _m(
        "in-progress-executes",
        "family: in progress",
        "the key is recorded only after the tool finished: a running duplicate runs too",
        "in-progress-no-second-execution",
    ),
    _m(
        "in-progress-waits",
        "family: in progress",
        "a running duplicate waits for the original, then gets its result",
        "in-progress-rejected-immediately",
    ),
    _m(
        "in-progress-hangs",
        "family: in progress",
        "a running duplicate is never answered",
        "in-progress-not-blocked",
    ),
    _m(
        "in-progress-no-data",
        "family: in progress",
        "the in-progress refusal has no error.data",
        "in-progress-error-data",
    ),
    _m(
        "scope-none",
        "family: scope",
        "records are not scoped: every caller shares one namespace",
        "scope-per-caller",
        http=True,
    ),
    _m(
        "retention-zero",
        "family: retention",
        "records expire the moment they are written",
        "duplicate-not-executed",
        retention=True,
    ),
    _m(
        "retention-short",
        "family: retention",
        "records are kept a quarter of the documented window",
        "retention-window",
        retention=True,
    ),
    _m(
        "store-per-instance",
        "family: shared store",
        "each instance keeps its records in its own memory (the shared store is ignored)",
        "shared-store",
        http=True,
    ),
    _m(
        "unkeyed-affected",
        "family: unkeyed",
        "calls without a key are deduplicated by their arguments",
        "unkeyed-unaffected",
    ),
    _m(
        "mrtr-keyed",
        "family: MRTR",
        "an MRTR continuation carrying the key is treated as a retry",
        "mrtr-continuation-excluded",
    ),
)


@dataclass(frozen=True)
class Variant:
    """A conforming choice the SEP leaves open: the kit must not fail it."""

    name: str
    why: str
    retention: bool = False


VARIANTS: tuple[Variant, ...] = (
    Variant(
        "retention-forever",
        "records never expire: 'indefinite retention is not required', not forbidden "
        "(Retention); a key outside the window only MAY be treated as new",
        retention=True,
    ),
)

BLIND_SPOTS = tuple(f"blind spot {n}" for n in range(1, 9))
FAMILIES = tuple(
    f"family: {f}"
    for f in (
        "capability",
        "key ignored",
        "replay",
        "errors replayed",
        "conflict",
        "equivalence",
        "in progress",
        "scope",
        "retention",
        "shared store",
        "unkeyed",
        "MRTR",
    )
)
