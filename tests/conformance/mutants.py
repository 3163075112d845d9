"""The kit's mutant catalogue: one bug each in the reference server, and the check that must fail.

A conformance kit is worth exactly the bugs it catches. Each `Mutant` switches on one bug in
`reference_server.py` (`--mutant NAME`) and names the check id(s) that must then report `fail`.
The catalogue follows the rule table of docs/conformance.md: for every rule, each plausible way
to get it wrong is a mutant (a test keeps the table and this file in step). Only the check a bug
breaks *first* is named, so that a dependant the kit reports as `blocked` by it is no surprise.
`families` are the check families the mutant's run selects (`--family`): the rule's own, plus
what its check needs. `Variant`s are not bugs: conforming choices the SEP leaves open, which the
full kit must pass.

No idemtools import here either: the catalogue is data, read by test_mutants.py.
"""

from __future__ import annotations

from dataclasses import dataclass

LEGACY, MODERN = "2025-11-25", "2026-07-28"
BOTH = (LEGACY, MODERN)


@dataclass(frozen=True)
class Mutant:
    """One bug. `eras`: the protocol eras the kit checks it in; `http`: over streamable HTTP,
    two instances and two callers (else stdio); `also_http`: over stdio, and once more over
    HTTP (a bug whose trigger differs by transport); `retention`: the run documents a short
    window (`--retention`), which the kit waits out."""

    name: str
    families: tuple[str, ...]
    bug: str
    expect: tuple[str, ...]
    eras: tuple[str, ...] = (MODERN,)
    http: bool = False
    retention: bool = False
    also_http: bool = False


def _ids(*names: str) -> tuple[str, ...]:
    return tuple(n if n.startswith("mcp-") else f"sep-3182-{n}" for n in names)


def _m(name: str, family: str, bug: str, *expect: str, **how: object) -> Mutant:
    families = tuple(family.split("+"))
    return Mutant(name, families, bug, _ids(*expect), **how)  # type: ignore[arg-type]


MUTANTS: tuple[Mutant, ...] = (
    # -- capability
    _m(
        "no-capability",
        "capability",
        "tools.idempotency is not advertised",
        "capability-initialize",
        "capability-discover",
        eras=BOTH,
    ),
    _m(
        "capability-true",
        "capability",
        "tools.idempotency is advertised as `true`, not an object",
        "capability-initialize",
        "capability-discover",
        eras=BOTH,
    ),
    # -- replay: a completed duplicate
    _m(
        "key-ignored",
        "replay",
        "idempotencyKey is ignored: every call runs",
        "duplicate-not-executed",
    ),
    _m(
        "replay-reexecutes",
        "replay",
        "a completed duplicate runs the tool again (and then answers the recorded result)",
        "duplicate-not-executed",
    ),
    _m(
        "replay-wrong-result",
        "replay",
        "a completed duplicate is answered with a generic 'already done', not the recorded result",
        "duplicate-returns-original",
    ),
    _m(
        "replay-drops-structured",
        "replay",
        "a replay is rebuilt from the text content: structuredContent is dropped",
        "duplicate-returns-original",
    ),
    _m(
        "replay-number-type",
        "replay",
        "a replay turns integers into floats (1 -> 1.0)",
        "replay-json-identical",
    ),
    _m(
        "replay-bool-type",
        "replay",
        "a replay turns booleans into integers (false -> 0)",
        "replay-json-identical",
    ),
    _m(
        "replay-adds-default",
        "replay",
        "a replay adds or drops a member holding its default (isError: false)",
        "replay-json-equal",
    ),
    _m(
        "replay-reserialised",
        "replay",
        "a replay is re-serialised (other separators, sorted members): same value, other text",
        "replay-raw-identical",
    ),
    _m(
        "replay-meta-timestamp",
        "replay",
        "a replay adds a fresh _meta timestamp",
        "replay-meta-identical",
    ),
    _m(
        "errors-not-replayed",
        "replay",
        "an isError result is not recorded: the retry runs again",
        "error-replayed",
    ),
    _m(
        "replay-drops-iserror",
        "replay",
        "an isError result is replayed without its isError member (as a success)",
        "error-replayed",
    ),
    _m(
        "throw-reexecuted",
        "replay",
        "a JSON-RPC error outcome is not recorded: every retry re-runs the tool",
        "error-replayed-jsonrpc",
    ),
    _m(
        "throw-replay-drops-data",
        "replay",
        "a JSON-RPC error is replayed without its error.data",
        "error-replayed-jsonrpc",
    ),
    _m(
        "jsonrpc-error-record-any-args",
        "replay",
        "a JSON-RPC error record is replayed for any arguments",
        "conflict-jsonrpc-error-record",
    ),
    _m(
        "large-not-recorded",
        "replay",
        "outcomes over 32 KiB are not recorded: their retry runs again",
        "replay-large-outcome",
    ),
    _m(
        "large-truncated",
        "replay",
        "outcomes over 32 KiB are recorded cut short",
        "replay-large-outcome",
    ),
    _m(
        "huge-reexecuted",
        "replay",
        "outcomes over 512 KiB are not recorded: a 1 MiB outcome's retry runs again",
        "replay-large-outcome",
    ),
    _m(
        "huge-error-unrecorded",
        "replay",
        "outcomes over 512 KiB run, are not recorded, and are answered with an internal error: "
        "the retry of that error runs the tool again",
        "replay-large-outcome",
    ),
    # -- in progress
    _m(
        "in-progress-executes",
        "in-progress",
        "the key is recorded only after the tool finished: a running duplicate runs too",
        "in-progress-no-second-execution",
    ),
    _m(
        "in-progress-waits",
        "in-progress",
        "a running duplicate waits for the original, then gets its result",
        "in-progress-rejected-immediately",
    ),
    _m(
        "in-progress-hangs",
        "in-progress",
        "a running duplicate is never answered",
        "in-progress-not-blocked",
    ),
    _m(
        "in-progress-no-data",
        "in-progress",
        "the in-progress refusal has no error.data",
        "in-progress-error-data",
    ),
    _m(
        "in-progress-corrupts",
        "in-progress",
        "the refused in-progress duplicate takes the claim over: the original's outcome is "
        "dropped and the key stays in progress forever",
        "in-progress-original-replayed",
    ),
    _m(
        "legacy-code",
        "in-progress+base",
        "the in-progress refusal uses -32001, in the legacy -32000..-32019 range",
        "mcp-base-error-codes-legacy",
        eras=BOTH,
    ),
    _m(
        "in-progress-lease-expires",
        "in-progress",
        "the in-progress claim is a 300 ms lease that nothing renews while the tool runs: a "
        "duplicate sent later runs again",
        "in-progress-late-duplicates",
    ),
    _m(
        "in-progress-conflict-executes",
        "in-progress",
        "one flight per key and arguments: other arguments under the key of a running call are "
        "not seen, and run",
        "in-progress-conflict-not-executed",
    ),
    # -- concurrency
    _m(
        "race-check-then-set",
        "concurrency",
        "the key is looked up, then claimed in a second step (an await between): two calls "
        "arriving together both run",
        "concurrent-duplicates-one-execution",
        also_http=True,
    ),
    # -- conflict
    _m(
        "conflict-not-detected",
        "conflict",
        "records are a set of keys, without the arguments: other arguments get the recorded result",
        "conflict-rejected",
        "conflict-no-cached-result",
    ),
    _m(
        "conflict-executes",
        "conflict",
        "other arguments under a used key run the tool, then get the conflict error",
        "conflict-not-executed",
    ),
    _m(
        "conflict-ignores-tool-name",
        "conflict",
        "the comparison leaves out the tool name",
        "conflict-tool-name",
    ),
    _m(
        "key-per-tool",
        "conflict",
        "records are keyed by tool name and key: the key under another tool runs",
        "conflict-tool-name",
    ),
    _m(
        "conflict-no-data-type",
        "conflict",
        "the conflict refusal's error.data has the key but no type",
        "conflict-error-data",
    ),
    _m(
        "error-record-any-args",
        "conflict",
        "an isError record is replayed for any arguments",
        "conflict-error-record",
    ),
    _m(
        "conflict-overwrites",
        "conflict",
        "a refused conflict overwrites the record's arguments with its own",
        "conflict-record-unchanged",
    ),
    _m(
        "conflict-deletes",
        "conflict",
        "a refused conflict deletes the record",
        "conflict-record-unchanged",
    ),
    _m(
        "conflict-clears-error-record",
        "conflict",
        "a refused conflict deletes a JSON-RPC error record (an error taken as safe to retry)",
        "conflict-record-unchanged",
    ),
    _m(
        "reserved-code",
        "conflict+base",
        "the conflict refusal uses -32077, a code the 2026-07-28 spec reserves and does not define",
        "mcp-base-error-codes-reserved",
    ),
    _m(
        "error-code-text",
        "keys+base",
        'an invalid-params error carries its code as a string ("-32602")',
        "mcp-base-error-object",
    ),
    # -- arguments: equivalence and its converse
    _m(
        "equiv-raw-text",
        "arguments",
        "the raw arguments text is compared",
        "equivalence-key-order",
        "equivalence-whitespace",
        "equivalence-escapes",
        "equivalence-numbers",
    ),
    _m(
        "equiv-key-order",
        "arguments",
        "object members are compared in the order written",
        "equivalence-key-order",
    ),
    _m(
        "equiv-whitespace",
        "arguments",
        "whitespace between tokens is compared",
        "equivalence-whitespace",
    ),
    _m(
        "equiv-escapes",
        "arguments",
        "string literals are compared as written (escapes not resolved)",
        "equivalence-escapes",
    ),
    _m(
        "equiv-numbers",
        "arguments",
        "numbers are compared with their type (1 != 1.0)",
        "equivalence-numbers",
    ),
    _m(
        "unicode-normalised",
        "arguments",
        "strings in the arguments are NFC-normalised before comparing",
        "no-unicode-normalization",
    ),
    _m(
        "meta-compared",
        "arguments",
        "params._meta is part of the comparison (a fresh progressToken is a conflict)",
        "equivalence-meta-ignored",
    ),
    _m(
        "args-top-level-only",
        "arguments",
        "only the top level of the arguments is compared (nested values by their type)",
        "conflict-nested-arguments",
    ),
    _m(
        "args-nested-keys-dropped",
        "arguments",
        "nested members whose names are not top-level names are dropped before comparing (as "
        "JavaScript's JSON.stringify with a replacer array of the top-level keys does)",
        "conflict-nested-arguments",
    ),
    _m(
        "args-lists-sorted",
        "arguments",
        "lists are sorted before comparing",
        "conflict-nested-arguments",
    ),
    _m(
        "args-lists-deduped",
        "arguments",
        "lists are compared as sets (repeated items dropped)",
        "conflict-nested-arguments",
    ),
    _m(
        "args-str-leaves",
        "arguments",
        'values are compared as their text: the string "1" and the number 1 match',
        "conflict-value-types",
    ),
    _m(
        "args-python-equality",
        "arguments",
        "values are compared with Python's ==, where true == 1 and false == 0",
        "conflict-value-types",
    ),
    _m(
        "args-null-dropped",
        "arguments",
        "null members are dropped before comparing (null matches an absent member)",
        "conflict-value-types",
    ),
    _m(
        "args-strings-folded",
        "arguments",
        "strings are trimmed and case-folded before comparing",
        "conflict-value-types",
    ),
    _m(
        "args-empty-equal",
        "arguments",
        'empty values are one value: "", null, {} and [] match',
        "conflict-value-types",
    ),
    # -- keys
    _m("key-casefold", "keys", "keys are compared case-insensitively", "key-case-sensitive"),
    _m("key-trimmed", "keys", "keys are trimmed before lookup", "key-whitespace-significant"),
    _m("key-nfc", "keys", "keys are NFC-normalised before lookup", "key-unicode-exact"),
    _m(
        "key-any-json",
        "keys",
        'a key that is not a string is accepted as its JSON text (42 is the key "42")',
        "malformed-key-refused",
    ),
    _m(
        "key-truncated",
        "keys",
        "keys are cut to 200 characters (a column width)",
        "key-long-distinct",
    ),
    # -- unkeyed
    _m(
        "unkeyed-affected",
        "unkeyed",
        "calls without a key are deduplicated by their arguments",
        "unkeyed-unaffected",
    ),
    # -- scope
    _m(
        "scope-none",
        "scope",
        "records are not scoped: every caller shares one namespace",
        "scope-per-caller",
        http=True,
    ),
    _m(
        "scope-per-connection",
        "scope",
        "records are scoped per session (2025-11-25) or per TCP connection (2026-07-28)",
        "scope-across-connections",
        eras=BOTH,
        http=True,
    ),
    # -- MRTR
    _m(
        "mrtr-keyed",
        "mrtr",
        "an MRTR continuation carrying the key is treated as a retry",
        "mrtr-continuation-excluded",
    ),
    # -- shared store
    _m(
        "store-per-instance",
        "shared-store",
        "each instance keeps its records in its own memory (the shared store is ignored)",
        "shared-store",
        http=True,
    ),
    # -- retention
    _m(
        "retention-zero",
        "retention+replay",
        "records expire the moment they are written",
        "duplicate-not-executed",
        retention=True,
    ),
    _m(
        "retention-short",
        "retention",
        "records are kept a quarter of the documented window",
        "retention-window",
        retention=True,
    ),
    _m(
        "retention-errors-short",
        "retention",
        "error outcomes (isError and JSON-RPC errors) are kept a quarter of the window",
        "retention-window-every-outcome",
        retention=True,
    ),
    _m(
        "retention-large-short",
        "retention",
        "outcomes over 32 KiB are kept a quarter of the window",
        "retention-window-every-outcome",
        retention=True,
    ),
    _m(
        "retention-lru-100",
        "retention",
        "only the newest 100 records are kept (eviction by count)",
        "retention-after-other-keys",
    ),
    # -- not-processed (an extension beyond the SEP: an INFO check)
    _m(
        "not-processed-on-replay",
        "not-processed",
        "a replayed JSON-RPC error says data.notProcessed: true (as if nothing had run)",
        "not-processed-hint",
        eras=BOTH,
    ),
)


@dataclass(frozen=True)
class Variant:
    """A conforming choice the SEP leaves open: the full kit must not fail it."""

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
    Variant(
        "record-size-limit",
        "a documented per-record limit: an outcome over 512 KiB is not stored, and its retry "
        "is refused with an error, running nothing (the kit notes the size)",
    ),
)
