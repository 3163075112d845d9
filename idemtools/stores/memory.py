"""MemoryStore: the embedded default, one process, built on cachetools' TLRUCache.

TLRUCache gives each record its own expiry and removes expired records on every write. Its LRU
eviction is exactly what an idempotency store must never do, so a claim that would need eviction
is refused with `StoreFullError` instead.

Records live in two TLRUCaches: claims in progress (expiry = lease, rewritten on every renewal)
and completed records (expiry = retention, written once). A completed record therefore costs one
cache write, and TLRUCache's lazily-deleted heap entries pile up only in the small in-progress
cache, which compacts them itself. Ids, fingerprints and owner tokens are kept as raw bytes when
they are the hex strings the engine produces, and turned back into the same strings in `Record`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from cachetools import Cache, TLRUCache

from ..errors import StoreFullError
from .base import Claim, Record, Status

__all__ = ["MemoryStore"]

_Meta = bytes | tuple[str, str]
"""(fingerprint, owner): 48 raw bytes for the engine's SHA-256 / 128-bit hex, else the strings."""


class _Entry:
    # Mutable on purpose: renew/complete update in place and re-set the item to move its expiry.
    # Status is not stored: it is which cache holds the entry.
    __slots__ = ("expires", "meta", "outcome")

    def __init__(self, meta: _Meta, expires: float) -> None:
        self.meta = meta
        self.expires = expires
        self.outcome: bytes | None = None


def _ttu(_key: object, entry: _Entry, _now: float) -> float:
    return entry.expires


# Reads go straight to the underlying mapping (Cache's own methods, as TLRUCache itself calls
# them): TLRUCache's `get`/`len` read the clock, reorder the LRU list and expire on every call
# (a miss in `get` even raises and catches KeyError twice). We read the clock once per
# operation and compare `entry.expires` ourselves; expired items are dropped by each cache's
# own writes (`__setitem__` expires first) and when the store nears `max_records`.
_contains = Cache.__contains__
_peek = Cache.__getitem__
_size = Cache.__len__

_CLAIMED = Claim(claimed=True)  # frozen: one shared answer instead of one per claim


def _unhex(text: str, size: int) -> bytes | None:
    """`text` as raw bytes if it is exactly `size` bytes of lowercase hex, else None."""
    if len(text) != 2 * size:
        return None
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    # fromhex also accepts upper case and spaces; only an exact round trip may be packed.
    return raw if raw.hex() == text else None


def _pack(fingerprint: str, owner: str) -> _Meta:
    fp = _unhex(fingerprint, 32)
    if fp is not None:
        ow = _unhex(owner, 16)
        if ow is not None:
            return fp + ow
    return (fingerprint, owner)


def _owner_of(meta: _Meta) -> str:
    return meta[32:].hex() if isinstance(meta, bytes) else meta[1]


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
        # We never let either cache reach the point of evicting: `claim` checks the total first,
        # and the caches' own bound is twice ours, so a late completion that re-creates an
        # expired claim (at most one per claim that was admitted) can never evict a record.
        room = 2 * max_records
        self._running: TLRUCache[bytes, _Entry] = TLRUCache(maxsize=room, ttu=_ttu, timer=clock)
        self._done: TLRUCache[bytes, _Entry] = TLRUCache(maxsize=room, ttu=_ttu, timer=clock)
        # Async callers run these under one event loop; the lock makes threaded use safe too.
        self._lock = threading.Lock()

    @staticmethod
    def _id(scope: str, key: str) -> bytes:
        # Collision-free: a tag byte, then either the 32 bytes of a SHA-256 hex scope (what the
        # engine passes) or a length-prefixed encoded scope, then the key (UTF-8, surrogates
        # kept, so every Python string has its own bytes).
        raw = _unhex(scope, 32)
        encoded_key = key.encode("utf-8", "surrogatepass")
        if raw is not None:
            return b"\x00" + raw + encoded_key
        encoded = scope.encode("utf-8", "surrogatepass")
        return b"\x01" + len(encoded).to_bytes(8, "big") + encoded + encoded_key

    @staticmethod
    def _record(entry: _Entry, status: Status, now: float) -> Record:
        meta = entry.meta
        if isinstance(meta, bytes):
            fingerprint, owner = meta[:32].hex(), meta[32:].hex()
        else:
            fingerprint, owner = meta
        return Record(
            status=status,
            fingerprint=fingerprint,
            owner=owner,
            remaining=max(0.0, entry.expires - now),
            outcome=entry.outcome,
        )

    def _find(self, rid: bytes, now: float) -> tuple[_Entry, Status] | None:
        done = self._done
        if _contains(done, rid):
            entry: _Entry = _peek(done, rid)
            if entry.expires > now:
                return entry, Status.COMPLETED
        running = self._running
        if _contains(running, rid):
            entry = _peek(running, rid)
            if entry.expires > now:
                return entry, Status.IN_PROGRESS
        return None

    def _expire(self, now: float) -> None:
        self._running.expire(now)
        self._done.expire(now)

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._running) + len(self._done)

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            found = self._find(rid, now)
            if found is not None:
                return Claim(claimed=False, existing=self._record(*found, now))
            # Raw sizes count expired items too, so they are an upper bound of the live count:
            # only a store near its bound pays for expiring both caches and counting again.
            if _size(self._running) + _size(self._done) >= self.max_records:
                self._expire(now)
                if _size(self._running) + _size(self._done) >= self.max_records:
                    raise StoreFullError(
                        f"memory store holds its maximum of {self.max_records} live records",
                        key=key,
                    )
            self._running[rid] = _Entry(_pack(fingerprint, owner), now + lease)
            return _CLAIMED

    def _drop_running(self, rid: bytes) -> None:
        # TLRUCache deletes, then raises KeyError if the item's time ran out meanwhile (its timer
        # is read again): we decided at our `now` that the claim was held, so that is no error.
        with contextlib.suppress(KeyError):
            del self._running[rid]

    def _held(self, rid: bytes, owner: str, now: float) -> _Entry | None:
        running = self._running
        if not _contains(running, rid):
            return None
        entry: _Entry = _peek(running, rid)
        if entry.expires <= now or _owner_of(entry.meta) != owner:
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
            self._running[rid] = entry
            return True

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            done = self._done
            if _contains(done, rid) and _peek(done, rid).expires > now:
                return False  # a completed record is final
            running = self._running
            if _contains(running, rid):
                # Late completion: our own claim, live or not, as long as nobody re-claimed.
                entry: _Entry = _peek(running, rid)
                if _owner_of(entry.meta) != owner:
                    return False
                self._drop_running(rid)
            elif fingerprint is not None:
                # Our lease ran out and the expired claim is gone: nobody claimed since.
                entry = _Entry(_pack(fingerprint, owner), now)
            else:
                return False
            entry.outcome = outcome
            entry.expires = now + retention
            self._done[rid] = entry
            return True

    async def release(self, scope: str, key: str, owner: str) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            if self._held(rid, owner, self._clock()) is None:
                return False
            self._drop_running(rid)
            return True

    async def get(self, scope: str, key: str) -> Record | None:
        with self._lock:
            now = self._clock()
            found = self._find(self._id(scope, key), now)
            return None if found is None else self._record(*found, now)

    def for_lease_keeper(self) -> MemoryStore:
        """This store itself: its operations take a thread lock and never await, so the lease
        keeper's thread may call them from its own event loop."""
        return self

    async def aclose(self) -> None:
        return None
