"""What every store writes the same way: its refusals, its bounds, key bytes, one safe retry.

Why one module: these were written two to four times across the stores, and a refusal's words
are what an operator greps for and a client reads, so they must not drift apart store by store.
Nothing here knows a driver; each store passes in what is its own (its name, its idea of a
broken connection).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from ..errors import QuotaExceededError, RecordCorruptError, StoreFullError
from ..outcome import tombstone
from .base import SCOPE_SHARE

__all__ = [
    "at_least_one",
    "corrupt",
    "encode",
    "key_digest",
    "not_kept",
    "once_more_if_broken",
    "quota_exceeded",
    "scope_byte_quota_exceeded",
    "share_of",
    "store_full",
]

log = logging.getLogger("idemtools")

T = TypeVar("T")


def encode(text: str) -> bytes:
    """A scope, key, fingerprint or owner as bytes: UTF-8 with lone surrogates kept, so every
    Python string (any JSON string key) has bytes of its own and compares exactly."""
    return text.encode("utf-8", "surrogatepass")


def key_digest(key: str) -> str:
    """The key's hash prefix as the engine logs it (`idemtools.key_digest`): never the key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# -- bounds -----------------------------------------------------------------------------------


def at_least_one(name: str, value: int | None, *, none: str | None = None) -> None:
    """Refuse a bound below 1 when a store is built; `none` says what None means, when the
    bound may be None ("no quota", "unbounded", "no budget")."""
    if value is None and none is not None:
        return
    if value is None or value < 1:
        raise ValueError(f"{name} must be at least 1" + (f" (or None for {none})" if none else ""))


def share_of(total: int, share: int | Literal["share"] | None) -> int | None:
    """A per-scope byte budget: `"share"` (the default) is a tenth of the store's, at least 1."""
    return max(1, total // SCOPE_SHARE) if share == "share" else share


# -- refusals ---------------------------------------------------------------------------------


def quota_exceeded(quota: int, key: str) -> QuotaExceededError:
    """A caller (scope) at its `max_records_per_scope`: the words are the same on every store."""
    return QuotaExceededError(
        f"this caller holds its maximum of {quota} live idempotency records; the call was not run",
        key=key,
    )


def scope_byte_quota_exceeded(share: int, key: str) -> QuotaExceededError:
    """A caller (scope) at its `max_bytes_per_scope` (MemoryStore, SQLiteStore)."""
    return QuotaExceededError(
        f"this caller holds its maximum of {share} bytes of idempotency records; the call was "
        "not run",
        key=key,
    )


def store_full(store: str, bound: int, what: str, key: str) -> StoreFullError:
    """The store as a whole at a bound: "`store` store holds its maximum of `bound` `what`"."""
    return StoreFullError(f"{store} store holds its maximum of {bound} {what}", key=key)


def corrupt(where: str, key: str, why: str) -> RecordCorruptError:
    """A record this release cannot read: refused (never replayed, never run again)."""
    return RecordCorruptError(
        f"the idempotency record for this key in {where} cannot be read ({why}); the call "
        "was not run",
        key=key,
    )


def not_kept(store: str, outcome: bytes, max_bytes: int | None, key: str) -> bytes:
    """Log that an outcome does not fit the byte budget and return the tombstone kept instead
    (the retry is refused with `idempotency_outcome_not_kept`, never run again). `store`
    names it in the log: "memory store", "SQLite store /var/lib/idem.db"."""
    log.warning(
        "%s: an outcome of %d bytes does not fit max_bytes=%s; kept a tombstone "
        "(retries get idempotency_outcome_not_kept) key_digest=%s",
        store,
        len(outcome),
        max_bytes,
        key_digest(key),
    )
    return tombstone(len(outcome))


# -- the one safe retry -------------------------------------------------------------------------


async def once_more_if_broken(
    attempt: Callable[[bool], Awaitable[T]],
    broken: Callable[[Exception], bool],
    *,
    before_retry: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """`attempt(False)`; if it failed on a broken connection, `attempt(True)` once more.

    The first attempt may or may not have reached the server, so each store writes its
    `attempt(retrying=True)` to be harmless either way (a record that already bears our
    unique owner token is ours). `before_retry` drops what the break left behind (a pool's
    dead idle connections). Any other error, and a second failure, propagate; the second
    carries the first as its context, as a traceback should show.
    """
    try:
        return await attempt(False)
    except Exception as exc:
        if not broken(exc):
            raise
        if before_retry is not None:
            await before_retry()
        return await attempt(True)
