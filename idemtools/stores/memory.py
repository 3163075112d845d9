"""MemoryStore: the embedded default, one process, built on cachetools' TLRUCache.

TLRUCache gives each record its own expiry (lease while in progress, retention once completed)
and removes expired records on every write. Its LRU eviction is exactly what an idempotency store
must never do, so a claim that would need eviction is refused with `StoreFullError` instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from cachetools import TLRUCache

from ..errors import StoreFullError
from .base import Claim, Record, Status

__all__ = ["MemoryStore"]


class _Entry:
    # Mutable on purpose: renew/complete update in place and re-set the item to move its expiry.
    __slots__ = ("expires", "fingerprint", "outcome", "owner", "status")

    def __init__(self, status: Status, fingerprint: str, owner: str, expires: float) -> None:
        self.status = status
        self.fingerprint = fingerprint
        self.owner = owner
        self.expires = expires
        self.outcome: bytes | None = None


def _ttu(_key: object, entry: _Entry, _now: float) -> float:
    return entry.expires


class MemoryStore:
    """Records in this process's memory: lost on restart, invisible to other instances.

    Right for stdio servers (one process per client) and single-instance servers. Bounded by
    `max_records` live records; each operation is a dict access plus a heap push (O(log n)).

    Args:
        max_records: live records at most; a claim beyond it is refused, never evicted.
        clock: seconds, monotonic; inject a fake to test expiry without sleeping.
    """

    kind = "memory"

    def __init__(
        self, *, max_records: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        self.max_records = max_records
        self._clock = clock
        self._cache: TLRUCache[str, _Entry] = TLRUCache(maxsize=max_records, ttu=_ttu, timer=clock)
        # Async callers run these under one event loop; the lock makes threaded use safe too.
        self._lock = threading.Lock()

    @staticmethod
    def _id(scope: str, key: str) -> str:
        # Length-prefixed, so no (scope, key) pair can spell another pair's id.
        return f"{len(scope)}:{scope}{key}"

    def _live(self, rid: str, now: float) -> _Entry | None:
        entry = self._cache.get(rid)
        if entry is None or entry.expires <= now:
            return None
        return entry

    @staticmethod
    def _record(entry: _Entry, now: float) -> Record:
        return Record(
            status=entry.status,
            fingerprint=entry.fingerprint,
            owner=entry.owner,
            remaining=max(0.0, entry.expires - now),
            outcome=entry.outcome,
        )

    def __len__(self) -> int:
        with self._lock:
            self._cache.expire()
            return len(self._cache)

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            entry = self._live(rid, now)
            if entry is not None:
                return Claim(claimed=False, existing=self._record(entry, now))
            self._cache.expire(now)
            if rid not in self._cache and len(self._cache) >= self.max_records:
                raise StoreFullError(
                    f"memory store holds its maximum of {self.max_records} live records",
                    key=key,
                )
            self._cache[rid] = _Entry(Status.IN_PROGRESS, fingerprint, owner, now + lease)
            return Claim(claimed=True)

    def _held(self, rid: str, owner: str, now: float) -> _Entry | None:
        entry = self._live(rid, now)
        if entry is None or entry.owner != owner or entry.status is not Status.IN_PROGRESS:
            return None
        return entry

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            entry = self._held(rid, owner, now)
            if entry is None:
                return False
            entry.expires = now + lease
            self._cache[rid] = entry
            return True

    async def complete(
        self, scope: str, key: str, owner: str, outcome: bytes, retention: float
    ) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            entry = self._held(rid, owner, now)
            if entry is None:
                return False
            entry.status = Status.COMPLETED
            entry.outcome = outcome
            entry.expires = now + retention
            self._cache[rid] = entry
            return True

    async def release(self, scope: str, key: str, owner: str) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            if self._held(rid, owner, self._clock()) is None:
                return False
            del self._cache[rid]
            return True

    async def get(self, scope: str, key: str) -> Record | None:
        with self._lock:
            now = self._clock()
            entry = self._live(self._id(scope, key), now)
            return None if entry is None else self._record(entry, now)

    async def aclose(self) -> None:
        return None
