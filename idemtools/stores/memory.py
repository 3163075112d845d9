"""MemoryStore: the embedded default, one process, every record in one dict with a heap of expiries.

Each record has its own expiry, and expired records are removed by every claim, before its
bounds are checked. Nothing is ever evicted (what an idempotency store must never do): a claim
that would need room is refused with `StoreFullError` instead.

Claims in progress (expiry = lease, moved on every renewal), lapsed claims and completed records
(expiry = retention) all live in one dict, id -> `_Entry`, with one min-heap of (until, id); an
entry's status follows from itself (no outcome yet: a claim). One table because every keyed
first execution claims and then completes: the claim becomes its completed record in place, no
second dict write, no change to the record counts, one byte sum to move by the outcome's size
less the claim's tombstone room, no heap push.

Each record has a heap entry at or before its expiry (once a claim's lease ran out: before the
end of its lapsed keep). An entry that comes up finds its record gone (skipped), over (removed),
or moved later by a renewal or a completion: pushed again at its expiry, or at the end of its
keep. So moving an expiry later pushes nothing, and a completed record holds one heap entry, not
also its claim's (the engine keeps lapsed claims for the retention, so a claim's keep ends
after its completed record's). The heap is rebuilt from the dict once stale entries outnumber
live ones. Ids, fingerprints and owner tokens are kept as raw bytes when they are the hex
strings the engine produces, and turned back into the same strings in `Record`.

Bounds
------
All checked inside the claim's lock, none ever met by evicting:

* `max_records` live records (default 100,000);
* `max_bytes` (default 256 MiB): the estimated memory of the records held, i.e. each record's
  outcome, id, fingerprint and owner plus `RECORD_OVERHEAD` bytes for the Python objects around
  them (measured with tracemalloc on CPython 3.11: about 400 bytes for a claim with a 12-byte
  key). Counting records alone allowed 100,000 × 1 MiB ≈ 94 GiB; bytes are what runs a process
  out of memory. The sums change in one place only, `MemoryStore._count`, which every write
  goes through, so every write path is accounted for, and an expired record stops counting
  when it is removed (a claim or a bound met removes expired records before it refuses);
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
A claim made with `keep_lapsed` stays in the table after its lease ran out, LAPSED, until
`keep_lapsed` seconds past it (its heap entry is that instant): it keeps counting in every bound
above like the claim it was, and the next claim of its key finds it.
"""

from __future__ import annotations

import binascii
import functools
import heapq
import threading
import time
from collections.abc import Callable
from typing import Literal

from ..errors import RefusedError
from ..outcome import TOMBSTONE_RESERVE
from ._common import (
    at_least_one,
    encode,
    not_kept,
    quota_exceeded,
    scope_byte_quota_exceeded,
    share_of,
    store_full,
)
from .base import SCOPE_SHARE, Claim, Record, Status, StoreInfo, describe

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
    # Mutable on purpose: renew and complete update the entry in place. Status is not stored:
    # no outcome yet is a claim (IN_PROGRESS while `expires` lasts, then LAPSED while `keep`
    # does), an outcome is a completed record (a tombstone is bytes too).
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
        # The bytes this record costs besides its outcome (see RECORD_OVERHEAD).
        if isinstance(meta, bytes):
            self.base = RECORD_OVERHEAD + id_size + len(meta)
        else:
            self.base = RECORD_OVERHEAD + id_size + _UNPACKED_META + len(meta[0]) + len(meta[1])

    def size(self) -> int:
        """What this record counts in the bounds: a claim holds the room its tombstone may
        need (`TOMBSTONE_RESERVE`), a completed record its outcome."""
        outcome = self.outcome
        return self.base + TOMBSTONE_RESERVE if outcome is None else self.base + len(outcome)

    def until(self) -> float:
        """When nothing of the record is left: its expiry, or the end of its lapsed keep."""
        return self.expires + self.keep

    def status(self, now: float) -> Status | None:
        """The record's status at `now`; None once nothing of it is left (`until` passed)."""
        if self.expires > now:
            return Status.IN_PROGRESS if self.outcome is None else Status.COMPLETED
        if self.outcome is None and self.expires + self.keep > now:
            return Status.LAPSED
        return None


def _scope_of(rid: bytes) -> bytes:
    """The scope part of a record id (see `MemoryStore._id`)."""
    if rid[0] == 0:
        return rid[:33]
    return rid[: 9 + int.from_bytes(rid[1:9], "big")]


class _Scope:
    """One scope's records present and the bytes they count (kept with a per-scope bound)."""

    __slots__ = ("bytes", "records")

    def __init__(self, records: int, size: int) -> None:
        self.records = records
        self.bytes = size


_NO_SCOPE = _Scope(0, 0)  # read (never written) for a scope that holds nothing


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
        self._entries: dict[bytes, _Entry] = {}  # every record: claims, lapsed, completed
        self._heap: list[tuple[float, bytes]] = []  # (until, id); stale ones skipped
        self._bytes = 0  # the sum of the entries' `size()`
        # Per scope, counted only with a per-scope bound (records, bytes as in `_bytes`).
        self._scopes: dict[bytes, _Scope] = {}
        self._scoped = max_records_per_scope is not None or max_bytes_per_scope is not None
        # Async callers run these under one event loop; the lock makes threaded use safe too.
        self._lock = threading.Lock()

    @property
    def bytes_used(self) -> int:
        """Estimated bytes of the records held, expired ones not yet removed included."""
        with self._lock:
            return self._bytes

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
        entry = self._entries.get(rid)
        if entry is None:
            return None
        status = entry.status(now)
        return None if status is None else (entry, status)

    def _count(self, sid: bytes, records: int, size: int) -> None:
        """The one place the byte sums change: `records` more records costing `size` more
        bytes in scope `sid`; every write goes through it, so every write is accounted for."""
        self._bytes += size
        if self._scoped:
            scope = self._scopes.get(sid)
            if scope is None:
                self._scopes[sid] = _Scope(records, size)
                return
            if records:  # else a record's size changed (a completion): its scope's bytes only
                left = scope.records + records
                if not left:  # no entry for a scope with nothing: no slow leak
                    del self._scopes[sid]
                    return
                scope.records = left
            scope.bytes += size

    def _drop(self, rid: bytes, sid: bytes | None = None) -> None:
        """Remove a record; `sid` is `_scope_of(rid)` when the caller has it already."""
        entry = self._entries.pop(rid, None)
        if entry is not None:
            self._count(_scope_of(rid) if sid is None else sid, -1, -entry.size())

    def _moved(self, rid: bytes, at: float) -> None:
        """A heap entry at `at` for record `rid`: a new record, or one whose expiry (or lapsed
        keep's end) moved before its heap entries (see `_expire`)."""
        heap = self._heap
        if len(heap) > 2 * len(self._entries) + 16:  # mostly stale: rebuild from the table
            self._rebuild()  # the record's new expiry included
        else:
            heapq.heappush(heap, (at, rid))

    def _rebuild(self) -> None:
        """The heap anew from the table: each record's expiry, nothing stale (a lapsed
        claim's entry comes up at once and is pushed again at the end of its keep)."""
        heap = self._heap
        heap[:] = [(e.expires, r) for r, e in self._entries.items()]
        heapq.heapify(heap)

    def _expire(self, now: float) -> None:
        """Remove every record whose `until` has passed (see the module docstring: each record
        has a heap entry at or before its expiry, or before its lapsed keep's end)."""
        heap, entries = self._heap, self._entries
        while heap and heap[0][0] <= now:
            rid = heapq.heappop(heap)[1]
            entry = entries.get(rid)
            if entry is None:
                continue  # removed: a stale entry
            expires = entry.expires
            if expires > now:  # moved later (a renewal, a completion): looked at then
                heapq.heappush(heap, (expires, rid))
            elif expires + entry.keep > now:  # a lapsed claim: looked at when its keep ends
                heapq.heappush(heap, (expires + entry.keep, rid))
            else:
                self._drop(rid)

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._entries)

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
            entries = self._entries
            found = entries.get(rid)
            if found is not None:
                status = found.status(now)
                if status is not None:
                    return self._claim_found(
                        rid, sid, found, status, fingerprint, owner, lease, keep_lapsed
                    )
            heap = self._heap
            if heap and heap[0][0] <= now:
                # Expired records count in the bounds until removed; an expired record under
                # `rid` goes too, so the claim takes its place.
                self._expire(now)
            expires = now + lease
            entry = _Entry(_pack(fingerprint, owner), expires, len(rid), now, keep_lapsed)
            size = entry.base + TOMBSTONE_RESERVE  # with the room its tombstone may need
            refusal = self._over(sid, 1, size, key)
            if refusal is not None:
                raise refusal
            entries[rid] = entry
            self._count(sid, 1, size)
            if len(heap) > 2 * len(entries) + 16:
                self._rebuild()
            else:
                heapq.heappush(heap, (expires, rid))
            return _CLAIMED

    def _claim_found(
        self,
        rid: bytes,
        sid: bytes,
        entry: _Entry,
        status: Status,
        fingerprint: str,
        owner: str,
        lease: float,
        keep: float,
    ) -> Claim:
        """A claim of a key that holds a record: ours already (a re-sent claim), a lapsed
        claim of the same fingerprint to take over, or the record to answer with."""
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
        heap = self._heap
        if heap and heap[0][0] <= now:
            self._expire(now)  # may remove the lapsed claim itself, on a clock read since
        held = self._entries.get(rid)
        self._entries[rid] = taken
        if held is None:
            self._count(sid, 1, taken.size())
        else:
            self._count(sid, 0, taken.size() - held.size())
        self._moved(rid, taken.expires)
        return Claim(True, None, lapsed)

    def _over(self, sid: bytes, records: int, size: int, key: str) -> RefusedError | None:
        """The refusal for `records` more records costing `size` more bytes in scope `sid`,
        None when they fit: the one place the bounds are checked (a claim adds a record; a
        completion adds only bytes, so the record counts are not asked).

        The caller's own bounds come first: a caller over its quota is told so, whatever the
        state of the store as a whole.
        """
        counts = self._scopes.get(sid, _NO_SCOPE)
        quota = self.max_records_per_scope
        if records and quota is not None and counts.records + records > quota:
            return quota_exceeded(quota, key)
        share = self.max_bytes_per_scope
        if share is not None and counts.bytes + size > share:
            return scope_byte_quota_exceeded(share, key)
        if records and len(self._entries) + records > self.max_records:
            return store_full("memory", self.max_records, "live records", key)
        if self._bytes + size > self.max_bytes:
            return store_full("memory", self.max_bytes, "bytes of records", key)
        return None

    def _held(self, rid: bytes, owner: str, now: float) -> _Entry | None:
        """Our own claim in progress under `rid`, else None."""
        entry = self._entries.get(rid)
        if (
            entry is None
            or entry.outcome is not None
            or entry.expires <= now
            or _owner_of(entry.meta) != owner
        ):
            return None
        return entry

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        rid = self._id(scope, key)
        with self._lock:
            now = self._clock()
            entry = self._held(rid, owner, now)
            if entry is None:
                return False
            lease_end = entry.expires
            entry.expires = now + lease
            if entry.expires < lease_end:  # a shorter lease than was left
                self._moved(rid, entry.expires)
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
            entry = self._entries.get(rid)
            expires = now + retention
            if entry is not None and entry.outcome is None and expires > now:
                # Our claim (live or not: a late completion, as long as nobody re-claimed)
                # becomes the completed record in place, when its outcome fits.
                meta = entry.meta
                ours = (meta[32:].hex() if isinstance(meta, bytes) else meta[1]) == owner
                grow = len(outcome) - TOMBSTONE_RESERVE  # the claim held the tombstone's room
                if ours and self._over(sid, 0, grow, key) is None:
                    lease_end = entry.expires
                    entry.outcome, entry.expires, entry.replaceable = outcome, expires, replaceable
                    # Claims' bookkeeping ends here (claimed_at is a claim's, not an outcome's).
                    entry.keep, entry.claimed, entry.took_over = 0.0, None, None
                    self._count(sid, 0, grow)
                    # The claim's heap entry (at or before its lease's end) serves, unless the
                    # record ends sooner or the lease ran out (the entry may be at the keep's end).
                    if expires < lease_end or lease_end <= now:
                        self._moved(rid, expires)
                    return True
            return self._complete(
                rid, sid, entry, key, owner, outcome, retention, fingerprint, replaceable, now
            )

    def _complete(
        self,
        rid: bytes,
        sid: bytes,
        entry: _Entry | None,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        fingerprint: str | None,
        replaceable: bool,
        now: float,
    ) -> bool:
        """Every completion but our claim's outcome fitting: a completed record (final, or
        ours and replaceable), someone else's claim, an outcome kept as a tombstone, no
        claim left, or a retention of no time."""
        if entry is not None and entry.outcome is not None and entry.expires > now:
            if _owner_of(entry.meta) != owner:
                return False  # a completed record is final...
            if not entry.replaceable:
                return True  # ...and ours already: a re-sent completion
            record = entry  # ours, and replaceable: recorded anew below
        elif entry is not None and entry.outcome is None:
            # Late completion: our own claim, live or not, as long as nobody re-claimed.
            if _owner_of(entry.meta) != owner:
                return False
            record = entry
        elif fingerprint is not None:
            # Our lease ran out and the expired claim is gone: nobody claimed since.
            record = _Entry(_pack(fingerprint, owner), now, len(rid))
        else:
            return False
        # Out of the table first (its bytes, a claim's tombstone room included, freed), so
        # that the room is checked without it and expiring cannot remove it.
        self._drop(rid, sid)
        record.outcome = outcome
        # Claims' bookkeeping ends here (claimed_at is a claim's, not an outcome's).
        record.keep, record.replaceable, record.claimed = 0.0, replaceable, None
        record.took_over = None
        if self._over(sid, 0, record.size(), key) is not None:
            self._expire(now)
            if self._over(sid, 0, record.size(), key) is not None:
                record.outcome = self._not_kept(outcome, key)
        record.expires = now + retention
        if record.expires > now:
            self._entries[rid] = record
            self._count(sid, 1, record.size())
            self._moved(rid, record.expires)  # may be before its heap entries: one anew
        # else kept for no time at all (a retention of 0 or less): nothing stays under rid
        return True

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
                if lapse:
                    return False  # nothing in progress to lapse (a lapsed claim stays so)
                # The owner's lapsed claim: an operator's release lets a retry run again.
                entry = self._entries.get(rid)
                if (
                    entry is None
                    or entry.status(now) is not Status.LAPSED
                    or _owner_of(entry.meta) != owner
                ):
                    return False
                self._drop(rid)
                return True
            if lapse and entry.keep > 0:
                entry.expires = now  # LAPSED from now, for its keep
                self._moved(rid, entry.until())  # its lease's end was later
            else:
                self._drop(rid)
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
