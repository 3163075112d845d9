"""A test oracle: MemoryStore's contract written another way, with two tables of records.

The same store as `idemtools/stores/memory.py` (bounds, byte budget, answers), but with claims
in progress and completed records in a table each, where the library keeps every record in one.
`tests/stores/test_memory.py` runs random operation sequences on both and requires the same
answers, bounds and byte budgets included (the reference store counts no bytes). Not used by
the library.

Its own description:

MemoryStore: the embedded default, one process, records in two dicts with heaps of expiries.

Each record has its own expiry, and expired records are removed on every write. Nothing is ever
evicted (what an idempotency store must never do): a claim that would need room is refused with
`StoreFullError` instead.

Claims in progress (expiry = lease, moved on every renewal) and completed records (expiry =
retention, written once) each live in a `_Records`: a plain dict with a heap of expiries. Every
keyed call adds a claim and a moment later moves it, with its outcome, to the completed records.
Ids, fingerprints and owner tokens are kept as raw bytes when they are the hex strings the engine
produces, and turned back into the same strings in `Record`.

Bounds
------
All checked inside the claim's lock, none ever met by evicting:

* `max_records` live records (default 100,000);
* `max_bytes` (default 256 MiB): the estimated memory of the records held, i.e. each record's
  outcome, id, fingerprint and owner plus `RECORD_OVERHEAD` bytes for the Python objects around
  them (measured with tracemalloc on CPython 3.11: about 400 bytes for a claim with a 12-byte
  key). Counting records alone allowed 100,000 × 1 MiB ≈ 94 GiB; bytes are what runs a process
  out of memory. The sums change in one place only, `_Records.add` and `_Records.remove` (both
  through `_Records.count`), which every write goes through, so every write path is accounted
  for, and an expired record stops counting when it is removed;
* `max_records_per_scope` and `max_bytes_per_scope` (default: a tenth of the store each,
  `SCOPE_SHARE`): live records and bytes per scope, so one caller flooding unique keys is
  refused with `QuotaExceededError` while every other scope claims on.

An outcome's size is known only at `complete`, after the tool ran. Refusing to record it then
would turn the bound into a second execution (the retry finds no record), so every claim
reserves room for a tombstone (`TOMBSTONE_RESERVE` bytes), and a completion whose outcome does
not fit the budget (or its scope's) records the tombstone instead: the budget is hard, and the
retry is refused with `idempotency_outcome_not_kept`, never run again.

Lapsed claims
-------------
A claim made with `keep_lapsed` stays in the claims' `_Records` after its lease ran out, LAPSED,
until `keep_lapsed` seconds past it (its heap entry is that instant): it keeps counting in every
bound above like the claim it was, and the next claim of its key finds it.
"""

from __future__ import annotations

import binascii
import functools
import heapq
import threading
import time
from collections.abc import Callable
from typing import Literal

from idemtools.errors import RefusedError
from idemtools.outcome import TOMBSTONE_RESERVE
from idemtools.stores._common import (
    at_least_one,
    encode,
    not_kept,
    quota_exceeded,
    scope_byte_quota_exceeded,
    share_of,
    store_full,
)
from idemtools.stores.base import SCOPE_SHARE, Claim, Record, Status, StoreInfo, describe

__all__ = ["RECORD_OVERHEAD", "SCOPE_SHARE", "MemoryStore"]


RECORD_OVERHEAD = 320
"""Bytes counted per record besides its id, fingerprint, owner and outcome: the `_Entry`, the
dict slot and heap entry, the bytes objects' headers (an upper bound: measured with a cache
that cost a little more per record)."""

_UNPACKED_META = 160
"""Extra bytes of an unpacked (fingerprint, owner) tuple of strings over the packed 48 bytes."""

_Meta = bytes | tuple[str, str]
"""(fingerprint, owner): 48 raw bytes for the engine's SHA-256 / 128-bit hex, else the strings."""


class _Entry:
    # Mutable on purpose: renew/complete update in place and re-set the item to move its expiry.
    # Status is not stored: it is which `_Records` holds the entry (and, for a claim, whether
    # its lease ran out: LAPSED while `keep` lasts).
    __slots__ = (
        "base",
        "claimed",
        "expires",
        "keep",
        "meta",
        "outcome",
        "replaceable",
        "took_over",
    )

    def __init__(
        self,
        meta: _Meta,
        expires: float,
        id_size: int,
        claimed: float | None = None,
        keep: float = 0.0,
    ) -> None:
        self.meta = meta
        self.expires = expires
        self.outcome: bytes | None = None
        self.claimed = claimed  # the clock when claimed (None: recorded by a late completion)
        self.keep = keep  # seconds kept LAPSED after `expires` (claims only)
        self.replaceable = False
        # The lapsed claim this claim took over (owner, claimed, lapsed, until), so a
        # take-over sent again is answered with it again.
        self.took_over: tuple[str, float | None, float, float] | None = None
        # The bytes this record costs before it has an outcome (see RECORD_OVERHEAD).
        if isinstance(meta, bytes):
            self.base = RECORD_OVERHEAD + id_size + len(meta)
        else:
            self.base = RECORD_OVERHEAD + id_size + _UNPACKED_META + len(meta[0]) + len(meta[1])

    def size(self) -> int:
        """What this record costs now: an outcome added by `complete` counts from then on."""
        outcome = self.outcome
        return self.base if outcome is None else self.base + len(outcome)

    def until(self) -> float:
        """When nothing of the record is left: its expiry, or the end of its lapsed keep."""
        return self.expires + self.keep


def _scope_of(rid: bytes) -> bytes:
    """The scope part of a record id (see `MemoryStore._id`)."""
    if rid[0] == 0:
        return rid[:33]
    return rid[: 9 + int.from_bytes(rid[1:9], "big")]


class _Scopes:
    """Per scope: the records present (`records`) and the bytes they count (`bytes`)."""

    __slots__ = ("bytes", "records")

    def __init__(self) -> None:
        self.records: dict[bytes, int] = {}
        self.bytes: dict[bytes, int] = {}

    def add(self, sid: bytes, delta: int, size: int) -> None:
        """Count `delta` records and `size` bytes more for scope `sid` (`_scope_of(rid)`)."""
        n = self.records.get(sid, 0) + delta
        if n > 0:
            self.records[sid] = n
            self.bytes[sid] = self.bytes.get(sid, 0) + size
        else:  # no entry for a scope with nothing: no slow leak
            self.records.pop(sid, None)
            self.bytes.pop(sid, None)


class _Records:
    """Records of one status: a dict, the bytes they cost, and a min-heap of (expiry, id).

    Used twice: for the claims in progress (few, short-lived, moved on every renewal) and for
    the completed records (written once, removed when their retention ends). No LRU order and
    no size callback (TLRUCache's, which made the completed cache the largest cost of a first
    execution): a renewal, a removal or a replacement leaves its old heap entry behind, skipped
    when it comes up, and the heap is rebuilt from the dict once stale entries outnumber live
    ones (as TLRUCache does). An expired record stays readable as such (callers compare
    `expires`) until `expire` drops it, which every `add` runs first. With a per-scope quota,
    `counts` (shared by both) counts the records present per scope.

    `reserve`: bytes counted per record on top of its own (`_Entry.size`): a claim holds the
    room its tombstone may need (`TOMBSTONE_RESERVE`), a completed record nothing.
    """

    __slots__ = ("bytes", "counts", "entries", "heap", "reserve")

    def __init__(self, counts: _Scopes | None, reserve: int = TOMBSTONE_RESERVE) -> None:
        self.entries: dict[bytes, _Entry] = {}
        self.heap: list[tuple[float, bytes]] = []
        self.bytes = 0  # the sum over the entries of their size plus `reserve`
        self.counts = counts
        self.reserve = reserve

    def count(self, sid: bytes, records: int, size: int) -> None:
        """The one place the byte sums change: `records` more records costing `size` more
        bytes, here and (with a per-scope quota) in scope `sid`'s counts."""
        self.bytes += size
        if self.counts is not None:
            self.counts.add(sid, records, size)

    def add(self, rid: bytes, entry: _Entry, now: float, sid: bytes) -> None:
        """Hold `entry` under `rid` (replacing what is there); `sid` is `_scope_of(rid)`."""
        heap = self.heap
        if heap and heap[0][0] <= now:
            self.expire(now)
        old = self.entries.get(rid)
        self.entries[rid] = entry
        size = entry.size() + self.reserve
        if old is None:
            self.count(sid, 1, size)
        else:
            self.count(sid, 0, size - old.size() - self.reserve)
        self.moved(rid, entry)

    def moved(self, rid: bytes, entry: _Entry) -> None:
        """Note `entry.expires` (a new record, or a renewal that just moved it)."""
        heap = self.heap
        if len(heap) > 2 * len(self.entries) + 16:
            heap[:] = [(e.until(), r) for r, e in self.entries.items()]
            heapq.heapify(heap)
        heapq.heappush(heap, (entry.until(), rid))

    def remove(self, rid: bytes, sid: bytes | None = None) -> None:
        """Remove a record; `sid` is `_scope_of(rid)` when the caller has it already."""
        entry = self.entries.pop(rid, None)
        if entry is not None:
            self.count(_scope_of(rid) if sid is None else sid, -1, -entry.size() - self.reserve)

    def expire(self, now: float) -> None:
        heap, entries = self.heap, self.entries
        while heap and heap[0][0] <= now:
            _, rid = heapq.heappop(heap)
            entry = entries.get(rid)
            if entry is not None and entry.until() <= now:  # else moved: a newer entry follows
                self.remove(rid)


_RESTARTS = (
    "Records are lost when the server restarts: a retry that reaches the restarted server "
    "runs the tool again."
)
_INSTANCES = (
    "Per process: each instance or worker has its own records, so a retry that reaches "
    "another instance runs the tool again. Run one instance, or use a shared store."
)
"""The generated docs' words for this store (`info()`)."""

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


@functools.lru_cache(maxsize=1024)
def _scope_prefix(scope: str) -> bytes:
    """A tag byte, then either the 32 bytes of a SHA-256 hex scope (what the engine passes) or
    a length-prefixed encoded scope. Cached: a server sees few scopes, and every operation
    needs its scope's prefix (bounded; the values are small)."""
    raw = _unhex(scope, 32)
    if raw is not None:
        return b"\x00" + raw
    encoded = encode(scope)
    return b"\x01" + len(encoded).to_bytes(8, "big") + encoded


_a2b_hex = binascii.a2b_hex


def _pack(fingerprint: str, owner: str) -> _Meta:
    # `_unhex(fingerprint, 32) + _unhex(owner, 16)` in one pass (every claim packs, inline):
    # the round trip of the joined text holds exactly when it holds for both parts. a2b_hex,
    # unlike fromhex, takes no spaces: only upper case is left for the round trip to refuse.
    if len(fingerprint) == 64 and len(owner) == 32:
        text = fingerprint + owner
        try:
            raw = _a2b_hex(text)
        except ValueError:  # binascii.Error, or a non-ASCII character
            return (fingerprint, owner)
        if raw.hex() == text:
            return raw
    return (fingerprint, owner)


def _owner_of(meta: _Meta) -> str:
    return meta[32:].hex() if isinstance(meta, bytes) else meta[1]


def _fingerprint_of(meta: _Meta) -> str:
    return meta[:32].hex() if isinstance(meta, bytes) else meta[0]


class MemoryStore:
    """Records in this process's memory: lost on restart, invisible to other instances.

    Right for stdio servers (one process per client) and single-instance servers. Bounded by
    `max_records` live records and `max_bytes` of estimated memory (see the module docstring);
    each operation is a dict access plus a heap push (O(log n)).

    Args:
        max_records: live records at most; a claim beyond it is refused, never evicted.
        max_bytes: estimated bytes of the records held (outcomes plus `RECORD_OVERHEAD` per
            record); a claim that would exceed it is refused with `StoreFullError`, and an
            outcome that does not fit is kept as a tombstone (the retry gets
            `idempotency_outcome_not_kept`; the tool never runs again).
        max_records_per_scope: live records (in progress or completed) per scope at most; a
            claim beyond it is refused with `QuotaExceededError`, other scopes unaffected.
            Default: a tenth of `max_records` (none below ten records), so one caller
            flooding unique keys cannot lock the others out. None: no quota.
        max_bytes_per_scope: bytes of records per scope at most, as `max_bytes` counts
            them: a claim beyond it is refused with `QuotaExceededError`, an outcome that
            would take its scope past it is kept as a tombstone. Default: a tenth of
            `max_bytes`. None: no per-scope budget.
        clock: seconds, monotonic; inject a fake to test expiry without sleeping. Records
            report `claimed_at`/`lapsed_at` on this clock, moved to the epoch when it is the
            default monotonic one.
    """

    kind = "memory"
    description = ""
    """Where the records live, for logs: nowhere to name (a subclass may say more)."""

    def __init__(
        self,
        *,
        max_records: int = 100_000,
        max_bytes: int = 256 << 20,
        max_records_per_scope: int | Literal["share"] | None = "share",
        max_bytes_per_scope: int | Literal["share"] | None = "share",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        at_least_one("max_records", max_records)
        at_least_one("max_bytes", max_bytes)
        if max_records_per_scope == "share":  # none for a store of fewer than ten records
            max_records_per_scope = max_records // SCOPE_SHARE or None
        max_bytes_per_scope = share_of(max_bytes, max_bytes_per_scope)
        at_least_one("max_records_per_scope", max_records_per_scope, none="no quota")
        at_least_one("max_bytes_per_scope", max_bytes_per_scope, none="no budget")
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_records_per_scope: int | None = max_records_per_scope
        self.max_bytes_per_scope: int | None = max_bytes_per_scope
        self._clock = clock
        self._epoch = time.time() - time.monotonic() if clock is time.monotonic else 0.0
        self.outcomes_not_kept = 0
        """Completions recorded as a tombstone because the outcome did not fit `max_bytes`."""
        # Nothing is ever evicted: `claim` and `complete` check every bound first.
        self._scopes = _Scopes()
        self._scoped = max_records_per_scope is not None or max_bytes_per_scope is not None
        counts = self._scopes if self._scoped else None
        self._running = _Records(counts)
        self._done = _Records(counts, reserve=0)
        # Async callers run these under one event loop; the lock makes threaded use safe too.
        self._lock = threading.Lock()

    @property
    def bytes_used(self) -> int:
        """Estimated bytes of the records held, expired ones not yet removed included."""
        with self._lock:
            return int(self._running.bytes + self._done.bytes)

    def info(self) -> StoreInfo:
        """In-process memory, bounded by `max_records` and `max_bytes` (see `Store.info`)."""
        return StoreInfo(
            kind=self.kind,
            label="in-process memory",
            description=describe(self.kind, self.description),
            restarts=_RESTARTS,
            instances=_INSTANCES,
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            max_records_per_scope=self.max_records_per_scope,
        )

    @staticmethod
    def _id(scope: str, key: str) -> bytes:
        # Collision-free: the scope's prefix (see `_scope_prefix`), then the key (UTF-8,
        # surrogates kept, so every Python string has its own bytes); `encode` inline, as on
        # every hot path of this store.
        return _scope_prefix(scope) + key.encode("utf-8", "surrogatepass")

    def _record(self, entry: _Entry, status: Status, now: float) -> Record:
        meta = entry.meta
        if isinstance(meta, bytes):
            fingerprint, owner = meta[:32].hex(), meta[32:].hex()
        else:
            fingerprint, owner = meta
        claimed = entry.claimed
        if status is Status.LAPSED:
            return Record(
                status,
                fingerprint,
                owner,
                max(0.0, entry.until() - now),
                None,
                None if claimed is None else claimed + self._epoch,
                entry.expires + self._epoch,
            )
        return Record(
            status,
            fingerprint,
            owner,
            max(0.0, entry.expires - now),
            entry.outcome,
            None if claimed is None else claimed + self._epoch,
            None,
            entry.replaceable,
        )

    def _find(self, rid: bytes, now: float) -> tuple[_Entry, Status] | None:
        entry = self._done.entries.get(rid)
        if entry is not None and entry.expires > now:
            return entry, Status.COMPLETED
        claim = self._running.entries.get(rid)
        if claim is not None:
            if claim.expires > now:
                return claim, Status.IN_PROGRESS
            if claim.expires + claim.keep > now:
                return claim, Status.LAPSED
        return None

    def _expire(self, now: float) -> None:
        self._running.expire(now)
        self._done.expire(now)

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._running.entries) + len(self._done.entries)

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease: float,
        *,
        keep_lapsed: float = 0.0,
    ) -> Claim:
        sid = _scope_prefix(scope)
        rid = sid + key.encode("utf-8", "surrogatepass")  # `_id`, with the scope's part kept
        with self._lock:
            now = self._clock()
            found = self._find(rid, now)
            if found is not None:
                return self._claim_found(rid, sid, found, fingerprint, owner, lease, keep_lapsed)
            entry = _Entry(_pack(fingerprint, owner), now + lease, len(rid), now, keep_lapsed)
            size = entry.size() + TOMBSTONE_RESERVE  # with the room its tombstone may need
            refusal = self._over_bound(sid, size, key)
            if refusal is not None:
                # Expired records count until removed: only a store (or scope) near a bound
                # pays for removing them and looking again.
                self._expire(now)
                refusal = self._over_bound(sid, size, key)
                if refusal is not None:
                    raise refusal
            self._running.add(rid, entry, now, sid)
            return _CLAIMED

    def _claim_found(
        self,
        rid: bytes,
        sid: bytes,
        found: tuple[_Entry, Status],
        fingerprint: str,
        owner: str,
        lease: float,
        keep: float,
    ) -> Claim:
        """A claim of a key that holds a record: ours already (a re-sent claim), a lapsed
        claim of the same fingerprint to take over, or the record to answer with."""
        entry, status = found
        now = self._clock()
        if status is Status.IN_PROGRESS and _owner_of(entry.meta) == owner:
            # Ours already: a re-sent claim, answered as the first was.
            took = entry.took_over
            if took is None:
                return _CLAIMED
            prior, claimed, lapsed_at, until = took
            return Claim(
                True,
                None,
                Record(
                    Status.LAPSED,
                    _fingerprint_of(entry.meta),
                    prior,
                    max(0.0, until - now),
                    None,
                    None if claimed is None else claimed + self._epoch,
                    lapsed_at + self._epoch,
                ),
            )
        if status is not Status.LAPSED or _fingerprint_of(entry.meta) != fingerprint:
            return Claim(False, self._record(entry, status, now))
        lapsed = self._record(entry, status, now)
        # The same record, under a new owner: it needs no more room than it held.
        taken = _Entry(_pack(fingerprint, owner), now + lease, len(rid), now, keep)
        taken.took_over = (lapsed.owner, entry.claimed, entry.expires, entry.until())
        self._running.add(rid, taken, now, sid)
        return Claim(True, None, lapsed)

    def _over_bound(self, sid: bytes, size: int, key: str) -> RefusedError | None:
        """The refusal of a claim costing `size` bytes in scope `sid`, None when it fits.

        The quota is checked first: a caller over its own quota is told so, whatever the state
        of the store as a whole.
        """
        quota = self.max_records_per_scope
        if quota is not None and self._scopes.records.get(sid, 0) >= quota:
            return quota_exceeded(quota, key)
        share = self.max_bytes_per_scope
        if share is not None and self._scopes.bytes.get(sid, 0) + size > share:
            return scope_byte_quota_exceeded(share, key)
        running, done = self._running, self._done
        if len(running.entries) + len(done.entries) >= self.max_records:
            return store_full("memory", self.max_records, "live records", key)
        if running.bytes + done.bytes + size > self.max_bytes:
            return store_full("memory", self.max_bytes, "bytes of records", key)
        return None

    def _held(self, rid: bytes, owner: str, now: float) -> _Entry | None:
        entry = self._running.entries.get(rid)
        if entry is None or entry.expires <= now or _owner_of(entry.meta) != owner:
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
            self._running.moved(rid, entry)
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
        replaceable: bool = False,
    ) -> bool:
        # Kept as an exact-size copy: orjson's `dumps` (how `Outcome.to_bytes` writes) returns
        # bytes that keep its whole write buffer, 4 KiB at least, so a kept record would cost
        # many times what `max_bytes` counts for it (and a page fault per keyed call).
        outcome = memoryview(outcome).tobytes()
        sid = _scope_prefix(scope)
        rid = sid + key.encode("utf-8", "surrogatepass")  # `_id`, with the scope's part kept
        with self._lock:
            now = self._clock()
            completed = self._done.entries.get(rid)
            claim = self._running.entries.get(rid)
            if completed is not None and completed.expires > now:
                if _owner_of(completed.meta) != owner:
                    return False  # a completed record is final...
                if not completed.replaceable:
                    return True  # ...and ours already: a re-sent completion
                self._done.remove(rid, sid)  # ours, and replaceable: recorded anew below
                entry = completed
            elif claim is not None:
                # Late completion: our own claim, live or not, as long as nobody re-claimed.
                if _owner_of(claim.meta) != owner:
                    return False
                self._running.remove(rid, sid)  # frees its bytes, the tombstone's room included
                entry = claim
            elif fingerprint is not None:
                # Our lease ran out and the expired claim is gone: nobody claimed since.
                entry = _Entry(_pack(fingerprint, owner), now, len(rid))
            else:
                return False
            entry.outcome = outcome
            # Claims' bookkeeping ends here (claimed_at is a claim's, not an outcome's).
            entry.keep, entry.replaceable, entry.claimed = 0.0, replaceable, None
            entry.took_over = None
            if self._no_room(sid, entry.size()):
                self._expire(now)
                if self._no_room(sid, entry.size()):
                    entry.outcome = self._not_kept(outcome, key)
            entry.expires = now + retention
            if entry.expires > now:
                self._done.add(rid, entry, now, sid)  # replaces an expired record, if any
            else:  # kept for no time at all (as TLRUCache did): nothing stays under rid
                self._done.remove(rid, sid)
            return True

    def _no_room(self, sid: bytes, size: int) -> bool:
        """Whether a completed record of `size` bytes fits neither the store's budget nor the
        budget of its scope `sid` (the claim's own bytes already freed)."""
        if self._running.bytes + self._done.bytes + size > self.max_bytes:
            return True
        share = self.max_bytes_per_scope
        return share is not None and self._scopes.bytes.get(sid, 0) + size > share

    def _not_kept(self, outcome: bytes, key: str) -> bytes:
        """The tombstone recorded in place of an outcome that does not fit `max_bytes`.

        It fits whenever the claim was still here (its reserved room was just freed); a late
        completion whose claim had already expired away has no reservation, and its tombstone
        is the one write let past the budget (a few hundred bytes), rather than lose the
        record and let a retry run the tool again.
        """
        self.outcomes_not_kept += 1
        return memoryview(not_kept("memory store", outcome, self.max_bytes, key)).tobytes()

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            entry = self._held(rid, owner, now)
            if entry is None:
                # The owner's lapsed claim: an operator's release.
                found = None if lapse else self._find(rid, now)
                if found is None or found[1] is not Status.LAPSED:
                    return False
                if _owner_of(found[0].meta) != owner:
                    return False
                self._running.remove(rid)
                return True
            if lapse and entry.keep > 0:
                entry.expires = now  # LAPSED from now, for its keep
                self._running.moved(rid, entry)
            else:
                self._running.remove(rid)
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
