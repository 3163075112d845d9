"""The SEP decision for one keyed call, with no I/O of its own.

    validate key → policy → scope → fingerprint → (the claim, by the engine) → answer

Each step is a plain function of its inputs: the engine strings them together around the two
steps that wait on something (the `authorize` hook and the store's claim), so the decision can
be read, and tested, without a store, an event loop or an SDK.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..bridges import KeySource
from ..canonical import CanonicalizationError, fingerprint
from ..errors import (
    NOT_PROCESSED,
    ArgumentsInvalidError,
    ConflictError,
    InProgressError,
    KeyInvalidError,
    RecordCorruptError,
    RefusedError,
    ScopeUnavailableError,
)
from ..outcome import Outcome
from ..policy import Policy
from ..scopes import CallContext
from ..stores.base import Record, Status

__all__ = [
    "REPLAY_META_KEY",
    "ToolCall",
    "answer_existing",
    "check_key",
    "claimed_at",
    "failed",
    "fingerprint_of",
    "key_digest",
    "mark_replay",
    "new_owner",
    "retry_after_ms",
    "scope_hash",
]

log = logging.getLogger("idemtools")

REPLAY_META_KEY = "io.github.idemtools/replayed"
"""The `_meta` key of the opt-in replay marker on replayed results."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One keyed `tools/call`, as the adapter saw it in dispatch.

    `key` is whatever the client sent (validated here). `policy` is what the adapter found
    for a server that holds its tools' functions (`Engine.policy_for(..., by_name=False)`:
    the function's own, a declared name's, or the default). None: a low-level server, which
    can only name the tool, so the registry answers by name, else the default applies.
    `source` is where the key came from (`idemtools.bridges`): a derived key's record lives in
    a namespace of its own, and telemetry says which.
    """

    name: str
    arguments: Mapping[str, Any] | None
    key: object
    context: CallContext = field(default_factory=CallContext)
    policy: Policy | None = None
    source: KeySource = "sep"


def key_digest(key: str) -> str:
    """A short hash of a key, for logs: keys are client data and may carry meaning."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def digest(key: object) -> str:
    """`key_digest` of a key not yet validated (a refusal may concern a non-string key)."""
    return key_digest(key) if isinstance(key, str) else f"<{type(key).__name__}>"


def check_key(key: object, max_length: int) -> str:
    """The key when it is one the SEP accepts (a string of 1 to `max_length` characters)."""
    if not isinstance(key, str) or not 1 <= len(key) <= max_length:
        raise KeyInvalidError(
            f"idempotencyKey must be a string of 1 to {max_length} characters", key=key
        )
    return key


def scope_hash(policy: Policy, context: CallContext, key: str) -> str:
    """The hashed scope of a call: its policy's strategy applied to the caller's context.
    A strategy that fails or answers nothing refuses the call; it never guesses a scope."""
    try:
        value = policy.scope(context)
    except RefusedError as exc:
        if exc.key is None:
            exc.key = key
        raise
    except Exception as exc:  # a user-written strategy failed: refuse, never guess
        log.warning("scope strategy %r failed: %r", policy.scope, exc)
        raise ScopeUnavailableError(f"the tool's scope strategy failed: {exc}", key=key) from exc
    if not isinstance(value, str) or not value:
        raise ScopeUnavailableError("the tool's scope strategy returned no scope", key=key)
    return scope_digest(value)


@functools.lru_cache(maxsize=1024)
def scope_digest(value: str) -> str:
    # A server sees few distinct scopes (one local user, its callers): remember their hashes
    # rather than run SHA-256 on every keyed call. Bounded; the values are already in memory.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def fingerprint_of(call: ToolCall, key: str) -> str:
    """The call's fingerprint (tool name and canonical arguments); arguments that cannot be
    compared as JSON are refused, since a retry could not be told from a different call."""
    try:
        return fingerprint(call.name, call.arguments)
    except CanonicalizationError as exc:
        raise ArgumentsInvalidError(
            f"arguments cannot be compared as JSON ({exc}); the call was not run", key=key
        ) from None


def new_owner(now: float) -> str:
    """A fresh owner token: 32 lowercase hex digits, unique per execution (80 random bits),
    whose first 12 are the claim's wall-clock time in milliseconds, so that an operator
    looking at a record (`idemtools keys show`) sees how long ago it was claimed. Stores treat
    owners as opaque strings."""
    global _owner_prefix
    ms = int(now * 1000)
    cached = _owner_prefix
    if cached[0] != ms:  # formatted once per millisecond, not per call (hot path)
        cached = _owner_prefix = (ms, f"{ms:012x}")
    return cached[1] + (_spare.pop() if _spare else _draw())


_owner_prefix: tuple[int, str] = (-1, "")

_BATCH = 64
_spare: list[str] = []  # random parts drawn ahead: one `getrandom` system call per 64 owners


def _draw() -> str:
    raw = os.urandom(10 * _BATCH).hex()
    _spare.extend(raw[i : i + 20] for i in range(20, len(raw), 20))
    return raw[:20]


# A forked child must never hand out its parent's spare random parts: two workers would fence
# with the same owner token.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_spare.clear)


def claimed_at(owner: str) -> float | None:
    """The claim time (seconds since the epoch) an owner token from `new_owner` carries, or
    None for a token of another shape (written by another release, or by hand)."""
    if len(owner) != 32:
        return None
    try:
        ms = int(owner[:12], 16)
    except ValueError:
        return None
    return ms / 1000 if 1_500_000_000_000 <= ms <= 10_000_000_000_000 else None


def answer_existing(
    record: Record, key: str, fp: str, policy: Policy, max_retry_after: float
) -> Outcome:
    """The answer to a call that found a record: its replay, or a refusal (raised) when the
    record is another call's (`ConflictError`), still running (`InProgressError`) or cannot
    be read (`RecordCorruptError`)."""
    if record.fingerprint != fp:
        raise ConflictError(
            "idempotencyKey was already used with a different tool name or arguments", key=key
        )
    if record.status is not Status.COMPLETED:  # running, or a lapsed claim being taken over
        raise InProgressError(
            "a request with this idempotencyKey is still in progress; retry shortly",
            key=key,
            retry_after_ms=retry_after_ms(record.remaining, policy.lease, max_retry_after),
        )
    try:
        if record.outcome is None:
            raise ValueError("completed record without an outcome")
        outcome = Outcome.from_bytes(record.outcome, key=key)
    except ValueError as exc:
        log.error("corrupt idempotency record key_digest=%s: %s", key_digest(key), exc)
        raise RecordCorruptError(
            "the stored outcome for this idempotencyKey cannot be read; the call was not run again",
            key=key,
        ) from None
    error = outcome.error
    if error is not None and isinstance(data := error.get("data"), dict) and NOT_PROCESSED in data:
        # A recorded outcome ran (or was relayed as run): a replay never says "no effect".
        rest = {k: v for k, v in data.items() if k != NOT_PROCESSED}
        return Outcome(error={**error, "data": rest}, replayed=True)
    return outcome


def mark_replay(outcome: Outcome) -> Outcome:
    """The opt-in replay marker (`_meta["io.github.idemtools/replayed"] = true`)."""
    if outcome.result is None:
        return outcome
    meta = dict(outcome.result.get("_meta") or {})
    meta[REPLAY_META_KEY] = True
    return Outcome(result={**outcome.result, "_meta": meta}, replayed=True)


def retry_after_ms(remaining: float, lease: float, cap: float) -> int:
    """A quarter of the lease, at most `cap`, and never later than the lease's end.

    The original call usually finishes long before its lease would run out; a short wait
    keeps a retrying client responsive, while the lease bounds it when the owner died.
    """
    wait = min(max(remaining, 0.0), lease / 4, cap)
    return max(1, math.ceil(wait * 1000))


def failed(outcome: Outcome) -> bool:
    """An error (JSON-RPC or `isError`) or an answer that does not end the operation."""
    if outcome.is_error or not outcome.final:
        return True
    return outcome.result is not None and outcome.result.get("isError") is True
