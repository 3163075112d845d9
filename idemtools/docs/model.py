"""The model of a server's idempotency: what `describe` reads off its `Installation`.

Plain frozen data (`ServerDoc` and its parts), the words the page uses for durations and for
each `error.data.type`, and `describe` itself. No Markdown here: rendering is `render`, and the
JSON output is `dataclasses.asdict` of this model, so its field names are public.

It only reads idemtools' own `Installation`, never the mcp SDK, so it works unchanged on every
SDK line `install()` supports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import bridges
from ..errors import ErrorCodes
from ..policy import Policy
from ..server.installation import installation_of
from ..stores.base import StoreInfo, TransactionalStore
from .errors import NotInstalledError, not_installed
from .examples import example_arguments
from .store_text import store_text

__all__ = [
    "ErrorDoc",
    "ServerDoc",
    "StoreDoc",
    "ToolDoc",
    "describe",
    "document",
    "first_retry_after_ms",
    "format_duration",
]


@dataclass(frozen=True)
class ToolDoc:
    """One tool's row: what a keyed call to it gets."""

    name: str
    deduplicated: bool
    """Always true once idemtools is installed: tools without a policy get the default."""
    policy: str
    """"own" (declared with `@idempotent`) or "server default"."""
    retention_seconds: float
    retention: str
    lease_seconds: float
    lease: str
    scope: str
    """The scope's description (a custom scope's own words)."""
    transactional: str
    """"yes", "no", or why a requested transaction does not happen."""
    scope_name: str = ""
    """Short, for the table: the strategy's name (`by_auth_subject`), else its description."""
    scope_on: dict[str, str | None] = dataclasses.field(default_factory=dict)
    """What the scope is per transport ("HTTP", "stdio"); None: keyed calls refused there."""
    example_arguments: dict[str, Any] | None = None
    """Minimal valid `arguments` built from the tool's input schema (None: schema unknown)."""
    key_sources: list[str] = dataclasses.field(default_factory=lambda: ["sep"])
    """Where a key may come from, in the order they win: "sep" (`idempotencyKey`), then a
    bridge outside SEP-3182, "argument" or "derived" (`idemtools.bridges`)."""
    key_argument: str | None = None
    """The argument whose value is the key when a client sends no `idempotencyKey`."""
    key_from: list[str] = dataclasses.field(default_factory=list)
    """The arguments a key is derived from when a client sends no `idempotencyKey`."""


@dataclass(frozen=True)
class StoreDoc:
    """Where records live, and what that means for restarts and for several instances."""

    kind: str
    label: str
    restarts: str
    instances: str
    bound: str = ""
    """What the store is bounded by, read from the store object the server passes to install()."""
    quota: str = ""
    """The per-caller (per-scope) record quota, or that there is none."""


@dataclass(frozen=True)
class ErrorDoc:
    """An `error.data.type` a client may receive, with its code and what to do about it."""

    type: str
    code: int
    meaning: str
    action: str


@dataclass(frozen=True)
class ServerDoc:
    """Everything the retention page shows, as plain data (also the JSON output)."""

    server: str
    source: str | None
    adapter: str
    store: StoreDoc
    default: ToolDoc
    tools: tuple[ToolDoc, ...]
    errors: tuple[ErrorDoc, ...]
    max_key_length: int
    max_outcome_bytes: int
    mark_replays: bool
    max_retry_after_seconds: float = 1.0
    """The engine's cap on `retryAfterMs` (`Engine(max_retry_after=)`)."""


# (meaning, what a client should do). Every ErrorCodes field must have an entry: a test checks.
_ERRORS: dict[str, tuple[str, str]] = {
    "idempotency_key_invalid": (
        "The key is not a string of 1 to {max_key} characters. Nothing ran.",
        "Fix the client: send a string key, e.g. a UUID.",
    ),
    "idempotency_arguments_invalid": (
        "The arguments are not plain JSON (NaN, infinity), so they cannot be compared. "
        "Nothing ran.",
        "Send JSON-representable arguments.",
    ),
    "idempotency_key_in_progress": (
        "A call with this key is still running. Nothing ran a second time.",
        "Retry the same request after `error.data.retryAfterMs` milliseconds.",
    ),
    "idempotency_key_conflict": (
        "This key was already used with a different tool name or different arguments. Nothing ran.",
        "Use a new key for a new operation; never reuse a key for different arguments.",
    ),
    "idempotency_scope_unavailable": (
        "The tool's scope cannot be determined for this request (for example HTTP without an "
        "access token, for a per-subject scope). Nothing ran.",
        "Authenticate, or call without a key if a duplicate is acceptable.",
    ),
    "idempotency_unauthorized": (
        "The tool's authorization check refused this caller; no recorded answer was read or "
        "written. Nothing ran.",
        "Call with credentials that grant the tool's permission.",
    ),
    "idempotency_store_full": (
        "The store is at its bound (live records or bytes); none is dropped early to make "
        "room. Nothing ran.",
        "Retry later; tell the server operator.",
    ),
    "idempotency_quota_exceeded": (
        "This caller already holds the maximum number of live records the server allows per "
        "scope (one caller flooding unique keys cannot lock others out). Nothing ran.",
        "Retry later with the same key, once older records expired; do not mint new keys "
        "faster than records expire.",
    ),
    "idempotency_store_unavailable": (
        "The idempotency store could not be reached, so the server refused rather than risk a "
        "second execution. Nothing ran (or, for a transactional tool, nothing it wrote was "
        "kept).",
        "Retry the same request later, with the same key.",
    ),
    "idempotency_record_corrupt": (
        "The stored record for this key cannot be read. The call was not run again.",
        "Do not retry with this key; check whether the first call took effect.",
    ),
    "idempotency_outcome_too_large": (
        "The original call ran, but its result exceeded {max_outcome} bytes and was not kept; "
        "this error is replayed in its place.",
        "Do not retry with this key: the operation already happened.",
    ),
    "idempotency_outcome_not_kept": (
        "The original call ran, but the idempotency store had no room left to keep its answer; "
        "a small marker was kept instead, so it never runs again under this key.",
        "Do not retry with this key: the operation already happened.",
    ),
    "idempotency_outcome_unknown": (
        "The call may have run, but it ended without its outcome being recorded (the server, "
        "or its upstream, stopped during it, or the tool ran past its time limit): whether it "
        "took effect is unknown.",
        "Do not retry with this key (a retry gets this same answer): check whether the "
        "operation happened, then act again, if at all, with a new key.",
    ),
}


def format_duration(seconds: float) -> str:
    """`86400` → "24 hours", `90` → "1 minute 30 seconds", `604800` → "7 days".

    Whole days are used from two days on: "24 hours" and "36 hours" read better than "1 day"
    and "1 day 12 hours" in a retention promise.
    """
    if seconds <= 0:
        return f"{_number(seconds)} seconds"
    whole = int(seconds)
    fraction = seconds - whole
    if fraction and whole < 60:
        return f"{_number(seconds)} seconds"
    parts: list[tuple[int, str]] = []
    rest = whole
    if rest >= 2 * 86400:
        parts.append((rest // 86400, "day"))
        rest %= 86400
    for size, unit in ((3600, "hour"), (60, "minute"), (1, "second")):
        if rest >= size:
            parts.append((rest // size, unit))
            rest %= size
    words = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts]
    if fraction:
        words.append(f"{_number(round(fraction, 3))} seconds")
    return " ".join(words)


def _number(value: float) -> str:
    """Seconds as shown: no ".0" on whole numbers, at most millisecond precision otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


async def describe(server: Any, *, source: str | None = None) -> ServerDoc:
    """Read what idemtools will do for every tool of `server`.

    Args:
        source: the `module:attribute` the server was loaded from, shown on the page.

    Raises:
        NotInstalledError: idemtools was never installed on `server`.
    """
    installation = installation_of(server)
    if installation is None:
        raise NotInstalledError(not_installed(source or "the server", server))
    name = getattr(server, "name", None)
    return document(
        server=name if isinstance(name, str) and name else (source or type(server).__name__),
        source=source,
        adapter=installation.adapter,
        engine=installation.engine,
        store=installation.store,
        tools=[
            (t.name, t.policy, "own" if t.own else "server default", t.input_schema)
            for t in await installation.tools()
        ],
    )


def document(
    *,
    server: str,
    source: str | None,
    adapter: str,
    engine: Any,
    store: Any,
    tools: Iterable[tuple[str, Policy, str, Mapping[str, Any] | None]],
) -> ServerDoc:
    """The page's model from its parts, for what has an engine and tools but no `Installation`
    (`idemtools proxy --docs`: the proxy's config and the upstream's `tools/list`).

    `tools` are (name, policy, where the policy comes from, input schema or None); `engine`
    gives the error codes, the limits and the default policy.
    """
    transactions = isinstance(store, TransactionalStore)
    info = store_text(store)
    tool_docs = tuple(
        _tool_doc(
            name,
            policy,
            origin,
            transactions,
            example_arguments(schema) if schema is not None else None,
        )
        for name, policy, origin, schema in tools
    )
    codes: ErrorCodes = engine.codes
    errors = tuple(
        ErrorDoc(
            type=f.name,
            code=codes.code_for(f.name),
            meaning=_ERRORS.get(f.name, ("", ""))[0].format(
                max_key=engine.max_key_length, max_outcome=engine.max_outcome_bytes
            ),
            action=_ERRORS.get(f.name, ("", ""))[1],
        )
        for f in dataclasses.fields(codes)
    )
    return ServerDoc(
        server=server,
        source=source,
        adapter=adapter,
        store=_store_doc(info),
        default=_tool_doc("(default)", engine.default_policy, "server default", transactions),
        tools=tool_docs,
        errors=errors,
        max_key_length=engine.max_key_length,
        max_outcome_bytes=engine.max_outcome_bytes,
        mark_replays=engine.mark_replays,
        max_retry_after_seconds=float(getattr(engine, "max_retry_after", 1.0)),
    )


def first_retry_after_ms(lease: float, cap: float) -> int:
    """`retryAfterMs` of an in-progress refusal just after the first call claimed its key.

    The engine's rule (`engine.decision.retry_after_ms`: a quarter of the lease, at most the
    engine's cap, never past the lease's end) with the whole lease still ahead; later in the
    lease it only shrinks. Written here because the docs import no engine; a test holds the two
    equal.
    """
    return max(1, math.ceil(min(max(lease, 0.0) / 4, cap) * 1000))


def _store_doc(info: StoreInfo) -> StoreDoc:
    return StoreDoc(
        kind=info.kind,
        label=info.label,
        restarts=info.restarts,
        instances=info.instances,
        bound=_bound(info),
        quota=_quota(info),
    )


def _bytes(size: int) -> str:
    """`268435456` → "256 MiB"; sizes that are not whole KiB/MiB/GiB stay in bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift:,} {unit}"
    return f"{size:,} bytes"


def _bound(info: StoreInfo) -> str:
    """The store's own limits, as configured (the page shows what this server runs with)."""
    parts = []
    if info.max_bytes is not None:
        parts.append(f"{_bytes(info.max_bytes)} of records (`max_bytes`)")
    if info.max_records is not None:
        parts.append(f"{info.max_records:,} live records (`max_records`)")
    if parts:
        limit = "at most " + " and ".join(parts)
    elif info.bound:
        limit = info.bound
    else:
        return "See the store's documentation."
    return (
        f"{limit}. At the bound, new keyed calls are refused with `idempotency_store_full`; "
        "no record is dropped before its retention ends."
    )


def _quota(info: StoreInfo) -> str:
    quota = info.max_records_per_scope
    if quota is not None:
        return (
            f"at most {quota:,} live records per scope (`max_records_per_scope`); a caller "
            "beyond it gets `idempotency_quota_exceeded`, other callers are unaffected."
        )
    return "none: one caller may fill the store up to its bound."


def _tool_doc(
    name: str,
    policy: Policy,
    source: str,
    transactions: bool,
    example: dict[str, Any] | None = None,
) -> ToolDoc:
    if not policy.transactional:
        transactional = "no"
    elif transactions:
        transactional = "yes"
    else:
        transactional = "requested, but this store has no transactions"
    return ToolDoc(
        name=name,
        deduplicated=True,
        policy=source,
        retention_seconds=policy.retention,
        retention=format_duration(policy.retention),
        lease_seconds=policy.lease,
        lease=format_duration(policy.lease),
        scope=policy.scope.description,
        transactional=transactional,
        scope_name=policy.scope.name,
        scope_on=dict(policy.scope.on),
        example_arguments=example,
        key_sources=list(bridges.key_sources(policy)),
        key_argument=policy.key_argument,
        key_from=list(policy.key_from),
    )
