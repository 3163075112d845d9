"""ReferenceStore: the store protocol as plain code, the executable spec. Not for production.

Why it exists: every real store is an optimisation of something (MemoryStore packs records into
bytes and expires claims through a heap; the others are Lua scripts and SQL). This one is a dict
of records and a clock, written to be read: each operation is the sentence of `base.py` that
specifies it. The conformance suite runs on it, MemoryStore is tested against it on random
operation sequences (the same answers, always), and the engine's tests can run on it, so a bug
in an optimisation is never mistaken for the engine's behaviour.

Not for production: nothing is ever removed but by `release` or a new claim over an expired
record, so it grows with every key it has seen, and it counts records, not bytes.

A claim in progress whose lease ran out is LAPSED while `keep_lapsed` seconds (given to its
claim) have not passed since: it counts in the bounds and is answered by `get` and `claim`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ._common import quota_exceeded, store_full
from .base import Claim, Record, Status, StoreInfo

__all__ = ["ReferenceStore"]


@dataclass
class _Entry:
    status: Status  # IN_PROGRESS (LAPSED once `expires` passed, while `keep` lasts) or COMPLETED
    fingerprint: str
    owner: str
    expires: float  # the lease's end, or the retention's
    outcome: bytes | None = None
    claimed_at: float | None = None
    keep: float = 0.0  # seconds a claim stays LAPSED after its lease ran out
    replaceable: bool = False
    # The lapsed claim this claim took over: (owner, claimed_at, lapsed_at, kept until), so
    # the take-over sent again (its answer was lost) is answered with it again.
    took_over: tuple[str, float | None, float, float] | None = None

    def status_at(self, now: float) -> Status | None:
        """The record's status at `now`; None once nothing of it is left."""
        if self.expires > now:
            return self.status
        if self.status is Status.IN_PROGRESS and self.expires + self.keep > now:
            return Status.LAPSED
        return None


class ReferenceStore:
    """The five operations on a dict, under a lock, on an injectable clock (see the module).

    Args:
        max_records: live records at most (None: no bound); a claim beyond it is refused.
        max_records_per_scope: live records per scope at most (None: no quota).
        clock: seconds; inject a fake to test expiry without sleeping. Records report
            `claimed_at`/`lapsed_at` on this clock, moved to the epoch when it is the default
            monotonic one.
    """

    kind = "reference"

    def __init__(
        self,
        *,
        max_records: int | None = None,
        max_records_per_scope: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_records = max_records
        self.max_records_per_scope = max_records_per_scope
        self._clock = clock
        self._epoch = time.time() - time.monotonic() if clock is time.monotonic else 0.0
        self._records: dict[tuple[str, str], _Entry] = {}
        self._lock = threading.Lock()  # so the lease keeper's thread may call in too

    def info(self) -> StoreInfo:
        return StoreInfo(
            kind=self.kind,
            label="in-process memory (the reference store, not for production)",
            description=self.kind,
            restarts="Records are lost when the server restarts.",
            instances="Per process: each instance has its own records.",
            max_records=self.max_records,
            max_records_per_scope=self.max_records_per_scope,
        )

    def for_lease_keeper(self) -> ReferenceStore:
        return self  # a lock and no awaits: callable from any thread's event loop

    def _live(self, scope: str, key: str, now: float) -> _Entry | None:
        """The record of the key, LAPSED ones included, or None."""
        entry = self._records.get((scope, key))
        return entry if entry is not None and entry.status_at(now) is not None else None

    def _held(self, scope: str, key: str, owner: str, now: float) -> _Entry | None:
        """The live claim in progress of `owner`: what renew and release act on."""
        entry = self._records.get((scope, key))
        if entry is None or entry.status_at(now) is not Status.IN_PROGRESS or entry.owner != owner:
            return None
        return entry

    def _record(self, entry: _Entry, now: float) -> Record:
        status = entry.status_at(now) or entry.status
        lapsed = status is Status.LAPSED
        end = entry.expires + entry.keep if lapsed else entry.expires
        return Record(
            status,
            entry.fingerprint,
            entry.owner,
            max(0.0, end - now),
            entry.outcome,
            claimed_at=None if entry.claimed_at is None else entry.claimed_at + self._epoch,
            lapsed_at=entry.expires + self._epoch if lapsed else None,
            replaceable=entry.replaceable,
        )

    def _took_over(self, entry: _Entry, now: float) -> Record | None:
        """The lapsed claim `entry` took over, as the take-over's answer gave it."""
        if entry.took_over is None:
            return None
        owner, claimed_at, lapsed_at, until = entry.took_over
        return Record(
            Status.LAPSED,
            entry.fingerprint,
            owner,
            max(0.0, until - now),
            claimed_at=None if claimed_at is None else claimed_at + self._epoch,
            lapsed_at=lapsed_at + self._epoch,
        )

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
        """No live record: create IN_PROGRESS(owner, fingerprint) for `lease` seconds, kept
        LAPSED for `keep_lapsed` seconds after it. Our own claim (re-sent): claimed. A LAPSED
        claim of the same fingerprint: taken over, and returned as `lapsed`. Any other live
        record: return it untouched. Bounds count live and lapsed records; quota first."""
        with self._lock:
            now = self._clock()
            entry = self._live(scope, key, now)
            if entry is not None:
                status = entry.status_at(now)
                if status is Status.IN_PROGRESS and entry.owner == owner:
                    # Ours already: a re-sent claim, answered as the first was.
                    return Claim(claimed=True, lapsed=self._took_over(entry, now))
                if status is not Status.LAPSED or entry.fingerprint != fingerprint:
                    return Claim(claimed=False, existing=self._record(entry, now))
                lapsed = self._record(entry, now)
                self._records[scope, key] = _Entry(
                    Status.IN_PROGRESS,
                    fingerprint,
                    owner,
                    now + lease,
                    None,
                    now,
                    keep_lapsed,
                    took_over=(
                        entry.owner,
                        entry.claimed_at,
                        entry.expires,
                        entry.expires + entry.keep,
                    ),
                )
                return Claim(claimed=True, lapsed=lapsed)
            live = [s for (s, _), e in self._records.items() if e.status_at(now) is not None]
            quota = self.max_records_per_scope
            if quota is not None and live.count(scope) >= quota:
                raise quota_exceeded(quota, key)
            if self.max_records is not None and len(live) >= self.max_records:
                raise store_full("reference", self.max_records, "live records", key)
            self._records[scope, key] = _Entry(
                Status.IN_PROGRESS, fingerprint, owner, now + lease, None, now, keep_lapsed
            )
            return Claim(claimed=True)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        """IN_PROGRESS, live and held by owner: the lease ends `lease` seconds from now (and
        the lapsed keep counts from that new end)."""
        with self._lock:
            now = self._clock()
            entry = self._held(scope, key, owner, now)
            if entry is None:
                return False
            entry.expires = now + lease
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
        """IN_PROGRESS (or LAPSED) and held by owner, live or not (late completion) as long as
        nobody claimed since: COMPLETED(outcome) for `retention` seconds. With `fingerprint`,
        a key with no claim at all (expired away, or a completed record that expired) is
        recorded anew. A live completed record of the same owner: overwritten when it was
        recorded `replaceable`, else left as it is and True (a re-sent completion). Anyone
        else's record is never overwritten."""
        with self._lock:
            now = self._clock()
            entry = self._records.get((scope, key))
            if entry is not None and entry.status is Status.IN_PROGRESS:
                if entry.owner != owner:
                    return False  # a second execution began: its claim is not ours
            elif entry is not None and entry.expires > now:
                if entry.owner != owner:
                    return False  # a completed record is final...
                if not entry.replaceable:
                    return True  # ...and ours already: a re-sent completion
            elif fingerprint is None:
                return False
            else:
                entry = _Entry(Status.IN_PROGRESS, fingerprint, owner, now)
                self._records[scope, key] = entry
            entry.status, entry.outcome, entry.expires = Status.COMPLETED, outcome, now + retention
            # Claims' bookkeeping ends here (claimed_at is a claim's, not an outcome's).
            entry.keep, entry.replaceable, entry.claimed_at = 0.0, replaceable, None
            entry.took_over = None
            return True

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        """IN_PROGRESS, live and held by owner: delete (the call ended without an outcome);
        with `lapse`, LAPSED at once instead (kept for the claim's keep_lapsed). LAPSED and
        held by owner: delete (an operator's release lets the next claim run the tool again);
        with `lapse`, left as it is and False (nothing in progress to lapse)."""
        with self._lock:
            now = self._clock()
            entry = self._held(scope, key, owner, now)
            if entry is None:
                entry = self._records.get((scope, key))
                if (
                    lapse
                    or entry is None
                    or entry.status_at(now) is not Status.LAPSED
                    or entry.owner != owner
                ):
                    return False
                del self._records[scope, key]
                return True
            if lapse and entry.keep > 0:
                entry.expires = now
            else:
                del self._records[scope, key]
            return True

    async def get(self, scope: str, key: str) -> Record | None:
        """The live record (LAPSED ones included), or None."""
        with self._lock:
            now = self._clock()
            entry = self._live(scope, key, now)
            return None if entry is None else self._record(entry, now)

    async def aclose(self) -> None:
        return None
