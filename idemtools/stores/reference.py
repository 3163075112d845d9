"""ReferenceStore: the store protocol as plain code, the executable spec. Not for production.

Why it exists: every real store is an optimisation of something (MemoryStore packs records into
bytes and expires claims through a heap; the others are Lua scripts and SQL). This one is a dict
of records and a clock, written to be read: each operation is the sentence of `base.py` that
specifies it. The conformance suite runs on it, MemoryStore is tested against it on random
operation sequences (the same answers, always), and the engine's tests can run on it, so a bug
in an optimisation is never mistaken for the engine's behaviour.

Not for production: nothing is ever removed but by `release` or a new claim over an expired
record, so it grows with every key it has seen, and it counts records, not bytes.
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
    status: Status
    fingerprint: str
    owner: str
    expires: float
    outcome: bytes | None = None


class ReferenceStore:
    """The five operations on a dict, under a lock, on an injectable clock (see the module).

    Args:
        max_records: live records at most (None: no bound); a claim beyond it is refused.
        max_records_per_scope: live records per scope at most (None: no quota).
        clock: seconds; inject a fake to test expiry without sleeping.
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
        entry = self._records.get((scope, key))
        return entry if entry is not None and entry.expires > now else None

    def _held(self, scope: str, key: str, owner: str, now: float) -> _Entry | None:
        """The live claim in progress of `owner`: what renew and release act on."""
        entry = self._live(scope, key, now)
        if entry is None or entry.status is not Status.IN_PROGRESS or entry.owner != owner:
            return None
        return entry

    @staticmethod
    def _record(entry: _Entry, now: float) -> Record:
        return Record(
            entry.status,
            entry.fingerprint,
            entry.owner,
            max(0.0, entry.expires - now),
            entry.outcome,
        )

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        """No live record: create IN_PROGRESS(owner, fingerprint) for `lease` seconds.
        A live record: return it untouched. Bounds count live records; quota first."""
        with self._lock:
            now = self._clock()
            entry = self._live(scope, key, now)
            if entry is not None:
                return Claim(claimed=False, existing=self._record(entry, now))
            live = [s for (s, _), e in self._records.items() if e.expires > now]
            quota = self.max_records_per_scope
            if quota is not None and live.count(scope) >= quota:
                raise quota_exceeded(quota, key)
            if self.max_records is not None and len(live) >= self.max_records:
                raise store_full("reference", self.max_records, "live records", key)
            self._records[scope, key] = _Entry(Status.IN_PROGRESS, fingerprint, owner, now + lease)
            return Claim(claimed=True)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        """IN_PROGRESS, live and held by owner: the lease ends `lease` seconds from now."""
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
    ) -> bool:
        """IN_PROGRESS and held by owner, live or not (late completion) as long as nobody
        claimed since: COMPLETED(outcome) for `retention` seconds. With `fingerprint`, a key
        with no claim at all (expired away, or a completed record that expired) is recorded
        anew. A live completed record, or anyone else's claim, is never overwritten."""
        with self._lock:
            now = self._clock()
            entry = self._records.get((scope, key))
            if entry is not None and entry.status is Status.IN_PROGRESS:
                if entry.owner != owner:
                    return False  # a second execution began: its claim is not ours
            elif entry is not None and entry.expires > now:
                return False  # a completed record is final
            elif fingerprint is None:
                return False
            else:
                entry = _Entry(Status.IN_PROGRESS, fingerprint, owner, now)
                self._records[scope, key] = entry
            entry.status, entry.outcome, entry.expires = Status.COMPLETED, outcome, now + retention
            return True

    async def release(self, scope: str, key: str, owner: str) -> bool:
        """IN_PROGRESS, live and held by owner: delete (the call ended without an outcome)."""
        with self._lock:
            if self._held(scope, key, owner, self._clock()) is None:
                return False
            del self._records[scope, key]
            return True

    async def get(self, scope: str, key: str) -> Record | None:
        """The live record, or None."""
        with self._lock:
            now = self._clock()
            entry = self._live(scope, key, now)
            return None if entry is None else self._record(entry, now)

    async def aclose(self) -> None:
        return None
