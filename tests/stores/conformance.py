"""One conformance suite for every store: the `Store` protocol's behaviour, written once.

How to run it against a store (the pattern of cachetools' `CacheTestMixin`)::

    class TestMyStore(StoreConformance):
        async def make_store(self, clock, *, max_records=None, max_bytes=None,
                             max_records_per_scope=None):
            return MyStore(..., clock=clock, max_records=max_records, ...)

The whole interface a subclass may touch:

``async make_store(clock, *, max_records=None, max_bytes=None, max_records_per_scope=None)``
    (required) Return a fresh, *empty* store. `clock` is a `FakeClock` (a zero-argument callable
    returning seconds) that the suite moves with `advance`; pass it to stores that take one.
    Stores whose expiry is driven by a server (Redis TTLs, PostgreSQL ``now()``) ignore it.
    `max_records` (None: the store's own default, large enough for every test) bounds the live
    records, `max_bytes` the bytes of records held (outcomes plus the store's per-record
    estimate), `max_records_per_scope` the live records of each scope (the per-caller quota);
    a store that has no such bound should ``pytest.skip`` when it is given. The suite closes
    every store it made (``aclose``) when the test ends. `self.tmp_path` is a per-test
    temporary directory, for stores that need files.

``async advance(seconds)``  (override for real-time stores)
    Make `seconds` pass for the store. The default moves the fake clock, so no test sleeps.
    A server-clock store overrides it with ``await anyio.sleep(seconds)`` and sets the time
    constants below to short values (e.g. ``LEASE = 0.4``, ``RETENTION = 0.8``).

What a store says about itself is part of the suite too: `info()` (a `StoreInfo` naming the
store's kind and the bounds it was built with) and `for_lease_keeper()` (a store the lease
keeper's own thread and event loop can renew through), read as the engine reads them, through
`store_info` and `lease_keeper_store`.

``LEASE``, ``RETENTION`` (seconds), ``TOLERANCE`` (seconds allowed between an expected and a
reported `remaining`), ``CONCURRENCY`` (claims raced in one test)
    Class attributes; every duration in the suite is expressed through `LEASE` and `RETENTION`
    (fractions and multiples of them), and "long" durations are ``LONG = 1000 * RETENTION``,
    never advanced past. `LEASE` < `RETENTION` is assumed.

Each test uses a fresh store. Scope and key strings are opaque to a store; the suite also uses
keys holding NUL, lone surrogates and astral characters, because the engine accepts any JSON
string of 1 to 255 characters as a key.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import anyio
import orjson
import pytest

from idemtools.errors import OutcomeNotKeptError, QuotaExceededError, StoreFullError
from idemtools.outcome import TOMBSTONE_RESERVE, Outcome, is_tombstone
from idemtools.stores.base import (
    Claim,
    FullStore,
    LapsingStore,
    Record,
    Status,
    Store,
    StoreInfo,
    lease_keeper_store,
    store_info,
)

__all__ = ["FakeClock", "StoreConformance"]

SCOPE = "scope-a"
OTHER_SCOPE = "scope-b"
FP1 = "fp-1"
FP2 = "fp-2"
OUTCOME = b'{"v":1,"result":{"content":[{"type":"text","text":"done"}],"isError":false}}'


class FakeClock:
    """Seconds that move only when told; wall-clock-like start so SQLite-style stores work."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _unicode_json() -> bytes:
    doc = {
        "v": 1,
        "result": {
            "content": [
                {"type": "text", "text": "héllo wörld — 你好 — 🔑🚀 — \u202e rtl — \u0000 nul"},
                {"type": "text", "text": "e\u0301 vs \u00e9 (not normalised)"},
            ],
            "structuredContent": {"ключ": ["значение", 1.5, None, True]},
        },
    }
    return orjson.dumps(doc)


def _large_json() -> bytes:
    # About 1 MiB of JSON with mixed ASCII and multi-byte text.
    chunk = "abcdefghij" * 9 + "ü€😀"
    data = json.dumps(
        {"v": 1, "result": {"content": [{"type": "text", "text": chunk * 10_600}]}},
        ensure_ascii=False,
    ).encode("utf-8")
    assert len(data) > 1_000_000
    return data


OUTCOMES = {
    "small": OUTCOME,
    "unicode-json": _unicode_json(),
    "escaped-json": json.dumps({"v": 1, "result": {"text": "é\ud83d\ude00"}}).encode("ascii"),
    "large-json": _large_json(),
    "every-byte": bytes(range(256)) * 4,  # the protocol says bytes; a store must not decode
}

KEYS = {
    "ascii": "order-42",
    "max-length": "k" * 255,
    "astral": "ключ-🔑-鍵",
    "nul": "a\x00b",
    "lone-surrogate": "x\ud800y",
    "sql-ish": "'; DROP TABLE idemtools_records; --",
}


class StoreConformance:
    """Base test class: subclass it and implement `make_store` (see the module docstring)."""

    LEASE: ClassVar[float] = 30.0
    RETENTION: ClassVar[float] = 600.0
    TOLERANCE: ClassVar[float] = 1e-6
    CONCURRENCY: ClassVar[int] = 50

    clock: FakeClock
    tmp_path: Path

    # -- the interface for subclasses ------------------------------------------------------

    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        raise NotImplementedError

    async def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # -- harness ---------------------------------------------------------------------------

    @property
    def LONG(self) -> float:  # a constant, spelled like the others
        return 1000 * self.RETENTION

    @pytest.fixture(autouse=True)
    async def _conformance_lifecycle(self, tmp_path: Path) -> AsyncIterator[None]:
        self.clock = FakeClock()
        self.tmp_path = tmp_path
        self._opened: list[LapsingStore] = []
        yield
        for store in reversed(self._opened):
            await store.aclose()

    async def open(
        self,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        store = await self.make_store(
            self.clock,
            max_records=max_records,
            max_bytes=max_bytes,
            max_records_per_scope=max_records_per_scope,
        )
        self._opened.append(store)
        return store

    def assert_remaining(self, record: Record, expected: float) -> None:
        assert record.remaining == pytest.approx(expected, abs=self.TOLERANCE), (
            f"remaining {record.remaining} != {expected} ± {self.TOLERANCE}"
        )

    def assert_at_most(self, record: Record, expected: float) -> None:
        """`remaining` is `expected`, or less by up to a quarter lease: a store on a real
        clock (Redis, PostgreSQL) is read after sleeps that may overrun, never run short."""
        low, high = expected - self.LEASE / 4 - self.TOLERANCE, expected + self.TOLERANCE
        assert low <= record.remaining <= high, f"remaining {record.remaining} not in {low}..{high}"

    async def in_progress(
        self, store: LapsingStore, key: str, owner: str, *, scope: str = SCOPE
    ) -> None:
        record = await store.get(scope, key)
        assert record is not None, f"{key!r} should be live"
        assert record.status is Status.IN_PROGRESS
        assert record.owner == owner
        assert record.outcome is None

    # -- claim -----------------------------------------------------------------------------

    async def test_store_satisfies_protocol(self) -> None:
        store = await self.open()
        assert isinstance(store, Store)
        assert isinstance(store.kind, str) and store.kind

    # -- what the store says about itself ---------------------------------------------------

    async def test_store_is_a_full_store(self) -> None:
        store = await self.open()
        assert isinstance(store, FullStore)

    async def test_info_describes_the_store(self) -> None:
        store = await self.open()
        assert isinstance(store, FullStore)
        info = store_info(store)
        assert isinstance(info, StoreInfo)
        assert info == store.info()
        assert info.kind == store.kind
        for text in (info.label, info.restarts, info.instances, info.description):
            assert isinstance(text, str) and text
        assert info.description.startswith(store.kind)  # the kind, then where (for logs)
        assert info.bound is None or (isinstance(info.bound, str) and info.bound)

    async def test_info_reports_max_records(self) -> None:
        store = await self.open(max_records=7)
        assert store_info(store).max_records == 7

    async def test_info_reports_max_bytes(self) -> None:
        store = await self.open(max_bytes=self.BUDGET)
        assert store_info(store).max_bytes == self.BUDGET

    async def test_info_reports_max_records_per_scope(self) -> None:
        store = await self.open(max_records_per_scope=3)
        assert store_info(store).max_records_per_scope == 3

    async def test_lease_keeper_store_renews_from_its_own_thread(self) -> None:
        # As the lease keeper does: open the keeper's store in a thread with an event loop of
        # its own, renew through it, close it if it is not the store itself.
        store = await self.open()
        # A first lease of 4 x LEASE: a networked keeper store connects in its thread first
        # (a Redis Cluster client discovers the slots), which took longer than half of a
        # 0.4 s lease on a loaded machine. The renewal still shows: it leaves LEASE, not ~3.5 x.
        assert (await store.claim(SCOPE, "k", FP1, "o1", 4 * self.LEASE)).claimed
        await self.advance(self.LEASE / 2)

        async def keeper_renews() -> tuple[bool, bool, bool]:
            keeper = lease_keeper_store(store)
            assert keeper is not None, "this store gives the lease keeper no store"
            try:
                return (
                    isinstance(keeper, Store),
                    await keeper.renew(SCOPE, "k", "intruder", self.LEASE),
                    await keeper.renew(SCOPE, "k", "o1", self.LEASE),
                )
            finally:
                if keeper is not store:
                    await keeper.aclose()

        is_store, intruder, owner = await anyio.to_thread.run_sync(
            lambda: asyncio.run(keeper_renews())
        )
        assert (is_store, intruder, owner) == (True, False, True)
        await self.in_progress(store, "k", "o1")
        record = await store.get(SCOPE, "k")
        assert record is not None
        self.assert_remaining(record, self.LEASE)  # renewed through the keeper's store
        # The store itself still works after the keeper's store was closed.
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION)

    async def test_claim_new_key(self) -> None:
        store = await self.open()
        assert await store.get(SCOPE, "k") is None
        claim = await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert claim == Claim(claimed=True, existing=None)
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert record.status is Status.IN_PROGRESS
        assert (record.fingerprint, record.owner, record.outcome) == (FP1, "o1", None)
        self.assert_remaining(record, self.LEASE)

    async def test_second_claim_returns_in_progress_record(self) -> None:
        store = await self.open()
        assert (await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)).claimed
        await self.advance(self.LEASE / 4)
        claim = await store.claim(SCOPE, "k", FP2, "o2", self.LEASE)
        assert claim.claimed is False
        existing = claim.existing
        assert existing is not None
        assert existing.status is Status.IN_PROGRESS
        assert existing.fingerprint == FP1  # the first claim's, not the caller's
        assert existing.owner == "o1"
        assert existing.outcome is None
        self.assert_remaining(existing, self.LEASE * 3 / 4)
        # Untouched: the losing claim neither took the key nor extended its lease.
        await self.in_progress(store, "k", "o1")
        record = await store.get(SCOPE, "k")
        assert record is not None and record.fingerprint == FP1
        self.assert_remaining(record, self.LEASE * 3 / 4)

    async def test_remaining_counts_down(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE / 2)
        record = await store.get(SCOPE, "k")
        assert record is not None
        self.assert_remaining(record, self.LEASE / 2)

    # -- complete --------------------------------------------------------------------------

    async def test_complete_by_owner_then_replay(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION) is True
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert record.status is Status.COMPLETED
        assert (record.fingerprint, record.owner, record.outcome) == (FP1, "o1", OUTCOME)
        self.assert_remaining(record, self.RETENTION)
        claim = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)
        assert claim.claimed is False
        assert claim.existing is not None
        assert claim.existing.status is Status.COMPLETED
        assert claim.existing.outcome == OUTCOME
        assert claim.existing.fingerprint == FP1

    async def test_completed_record_is_final(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION)
        await self.advance(self.LEASE / 2)
        # Not in progress any more: even its owner cannot rewrite, extend or delete it (its
        # completion sent again is answered yes, and changes nothing).
        assert await store.complete(SCOPE, "k", "o1", b'{"other":1}', self.LONG) is True
        assert await store.renew(SCOPE, "k", "o1", self.LONG) is False
        assert await store.release(SCOPE, "k", "o1") is False
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert record.status is Status.COMPLETED and record.outcome == OUTCOME
        self.assert_remaining(record, self.RETENTION - self.LEASE / 2)

    async def test_operations_on_missing_key_fail(self) -> None:
        store = await self.open()
        assert await store.renew(SCOPE, "k", "o1", self.LEASE) is False
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION) is False
        assert await store.release(SCOPE, "k", "o1") is False
        assert await store.get(SCOPE, "k") is None  # complete did not create a record

    # -- fencing ---------------------------------------------------------------------------

    async def test_wrong_owner_is_fenced(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE / 2)
        assert await store.complete(SCOPE, "k", "intruder", OUTCOME, self.RETENTION) is False
        assert await store.renew(SCOPE, "k", "intruder", self.LONG) is False
        assert await store.release(SCOPE, "k", "intruder") is False
        await self.in_progress(store, "k", "o1")
        record = await store.get(SCOPE, "k")
        assert record is not None
        self.assert_at_most(record, self.LEASE / 2)  # the intruder's renew changed nothing
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION) is True

    async def test_stale_owner_cannot_touch_new_claim(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "stale", self.LEASE)
        await self.advance(self.LEASE * 1.5)  # the stale owner's lease ran out...
        assert (await store.claim(SCOPE, "k", FP2, "fresh", self.LEASE)).claimed  # ...reclaimed
        assert await store.complete(SCOPE, "k", "stale", b'{"stale":1}', self.LONG) is False
        assert await store.renew(SCOPE, "k", "stale", self.LONG) is False
        assert await store.release(SCOPE, "k", "stale") is False
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.status, record.owner, record.fingerprint) == (
            Status.IN_PROGRESS,
            "fresh",
            FP2,
        )
        self.assert_remaining(record, self.LEASE)
        # The new owner completes; the stale owner still cannot overwrite the completed record.
        assert await store.complete(SCOPE, "k", "fresh", OUTCOME, self.RETENTION) is True
        assert await store.complete(SCOPE, "k", "stale", b'{"stale":1}', self.LONG) is False
        assert await store.release(SCOPE, "k", "stale") is False
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.status, record.owner, record.outcome) == (Status.COMPLETED, "fresh", OUTCOME)

    async def test_owner_with_expired_lease_is_not_holding(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE * 1.5)
        # Nobody re-claimed, but the lease is over: the claim cannot be renewed or released.
        assert await store.renew(SCOPE, "k", "o1", self.LEASE) is False
        assert await store.release(SCOPE, "k", "o1") is False
        assert await store.get(SCOPE, "k") is None

    # -- late completion (docs/contract.md, Fencing) ---------------------------------------

    async def test_late_completion_records_when_nobody_claimed(self) -> None:
        # A tool that blocked past its lease: its outcome is still recorded, then replayed.
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE * 1.5)
        assert await store.get(SCOPE, "k") is None  # the lease ran out...
        ok = await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION, fingerprint=FP1)
        assert ok is True  # ...but nobody else claimed, so the outcome is kept
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.status, record.fingerprint, record.owner, record.outcome) == (
            Status.COMPLETED,
            FP1,
            "o1",
            OUTCOME,
        )
        self.assert_remaining(record, self.RETENTION)
        replay = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)
        assert replay.claimed is False and replay.existing is not None
        assert replay.existing.outcome == OUTCOME

    async def test_late_completion_long_after_the_lease(self) -> None:
        # Long enough for every store to have forgotten the expired claim entirely.
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self._fill_expired_and_purge(store)
        ok = await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION, fingerprint=FP1)
        assert ok is True
        record = await store.get(SCOPE, "k")
        assert record is not None and record.status is Status.COMPLETED
        assert record.fingerprint == FP1

    async def _fill_expired_and_purge(self, store: LapsingStore) -> None:
        await self.advance(self.LEASE * 3)
        # Claims of other keys give stores that clean up lazily (on writes) their chance.
        for i in range(3):
            assert (await store.claim(SCOPE, f"other{i}", FP1, f"x{i}", self.LEASE)).claimed
        purge = getattr(store, "purge_expired", None)
        if purge is not None:
            await purge()

    async def test_late_completion_refused_after_another_claim(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "late", self.LEASE)
        await self.advance(self.LEASE * 1.5)
        assert (await store.claim(SCOPE, "k", FP1, "second", self.LEASE)).claimed
        # A second execution began: the late owner's outcome must not replace its claim.
        late = await store.complete(SCOPE, "k", "late", b'{"late":1}', self.LONG, fingerprint=FP1)
        assert late is False
        await self.in_progress(store, "k", "second")
        assert await store.complete(SCOPE, "k", "second", OUTCOME, self.RETENTION, fingerprint=FP1)
        late = await store.complete(SCOPE, "k", "late", b'{"late":1}', self.LONG, fingerprint=FP1)
        assert late is False
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.owner, record.outcome) == ("second", OUTCOME)

    async def test_late_completion_refused_after_expired_other_claim(self) -> None:
        # Another owner claimed after our lease ran out, and its own lease ran out too: a
        # second execution began, so the first owner's late outcome is refused.
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "first", self.LEASE)
        await self.advance(self.LEASE * 1.5)
        assert (await store.claim(SCOPE, "k", FP1, "second", self.LEASE)).claimed
        await self.advance(self.LEASE * 0.5)
        late = await store.complete(SCOPE, "k", "first", OUTCOME, self.RETENTION, fingerprint=FP1)
        assert late is False

    async def test_complete_twice_keeps_the_first_outcome(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION, fingerprint=FP1)
        # The same owner's completion sent again (a driver's or a proxy's re-send): its own
        # success, and the first outcome stays.
        again = await store.complete(SCOPE, "k", "o1", b'{"x":2}', self.LONG, fingerprint=FP1)
        assert again is True
        record = await store.get(SCOPE, "k")
        assert record is not None and record.outcome == OUTCOME

    # -- writes are idempotent by owner -----------------------------------------------------
    # A claim or completion that finds its own owner token is its own success, whoever sent
    # it again (the store's retry, the driver's, a proxy's): owner tokens are unique per call.

    async def test_claim_sent_twice_by_one_owner(self) -> None:
        store = await self.open()
        first = await store.claim(SCOPE, "k", FP1, "o1", self.LEASE, keep_lapsed=self.RETENTION)
        again = await store.claim(SCOPE, "k", FP1, "o1", self.LEASE, keep_lapsed=self.RETENTION)
        assert (first, again) == (Claim(claimed=True), Claim(claimed=True))
        plain = await store.claim(SCOPE, "p", FP1, "o2", self.LEASE)
        assert plain == await store.claim(SCOPE, "p", FP1, "o2", self.LEASE) == Claim(True)
        await self.in_progress(store, "k", "o1")
        await self.in_progress(store, "p", "o2")
        # Another owner is still refused, and the key is still ours to complete.
        other = await store.claim(SCOPE, "k", FP1, "o3", self.LEASE)
        assert not other.claimed and other.existing is not None and other.existing.owner == "o1"
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION)

    async def test_completion_sent_twice_by_one_owner(self) -> None:
        store = await self.open()
        assert (await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)).claimed
        for _ in range(2):
            ok = await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION, fingerprint=FP1)
            assert ok is True
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.status, record.owner, record.outcome) == (Status.COMPLETED, "o1", OUTCOME)
        # Fencing holds: another owner's completion is still refused.
        assert not await store.complete(SCOPE, "k", "o2", b"{}", self.RETENTION, fingerprint=FP1)

    async def test_replaceable_completion(self) -> None:
        store = await self.open()
        assert (await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)).claimed
        unknown = b'{"v":1,"unknown":true}'
        done = await store.complete(
            SCOPE, "k", "o1", unknown, self.RETENTION, fingerprint=FP1, replaceable=True
        )
        assert done is True
        record = await store.get(SCOPE, "k")
        assert record is not None and record.status is Status.COMPLETED
        assert (record.outcome, record.replaceable) == (unknown, True)
        # Another owner never replaces it; the same owner does, once.
        assert not await store.complete(SCOPE, "k", "o2", OUTCOME, self.RETENTION, fingerprint=FP1)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION, fingerprint=FP1)
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.owner, record.outcome, record.replaceable) == ("o1", OUTCOME, False)
        assert await store.complete(SCOPE, "k", "o1", unknown, self.RETENTION, fingerprint=FP1)
        record = await store.get(SCOPE, "k")
        assert record is not None and record.outcome == OUTCOME  # final now

    # -- lapsed claims -----------------------------------------------------------------------
    # A claim whose lease ran out is kept, LAPSED, for `keep_lapsed` seconds after it, so the
    # next claim finds it instead of running the tool again blindly.

    async def test_lapsed_claims(self) -> None:
        store = await self.open()
        keep = self.RETENTION
        for key in ("a", "b", "c", "renewed"):
            claim = await store.claim(SCOPE, key, FP1, f"o{key}", self.LEASE, keep_lapsed=keep)
            assert claim == Claim(claimed=True)
        assert (await store.claim(SCOPE, "today", FP1, "ot", self.LEASE)).claimed  # no keep
        await self.advance(self.LEASE * 0.5)
        assert await store.renew(SCOPE, "renewed", "orenewed", self.LEASE)
        await self.advance(self.LEASE)  # 1.5 leases: every lease ran out, "renewed" at 1.5
        assert await store.get(SCOPE, "today") is None  # keep_lapsed=0: no lapsed claim, a free key
        record = await store.get(SCOPE, "a")
        assert record is not None
        assert (record.status, record.owner, record.fingerprint, record.outcome) == (
            Status.LAPSED,
            "oa",
            FP1,
            None,
        )
        assert record.claimed_at is not None and record.lapsed_at is not None
        assert record.lapsed_at - record.claimed_at == pytest.approx(self.LEASE, abs=self.TOLERANCE)
        # Real-time stores overslept a little on a loaded machine: only less may be left.
        self.assert_at_most(record, keep - self.LEASE / 2)
        renewed = await store.get(SCOPE, "renewed")
        assert renewed is not None and renewed.status is Status.LAPSED
        self.assert_at_most(renewed, keep)  # kept `keep` past the renewed lease's end
        assert renewed.remaining > record.remaining + self.LEASE / 4
        # The dead owner holds nothing it could renew or lapse (its release is an operator's:
        # test_release_frees_a_lapsed_claim)...
        assert await store.renew(SCOPE, "a", "oa", self.LEASE) is False
        assert await store.release(SCOPE, "a", "oa", lapse=True) is False
        # ...another fingerprint is answered with the lapsed claim, nothing taken over...
        other = await store.claim(SCOPE, "a", FP2, "x", self.LEASE, keep_lapsed=keep)
        assert not other.claimed and other.existing is not None
        assert (other.existing.status, other.existing.owner) == (Status.LAPSED, "oa")
        # ...the same fingerprint takes it over and is told what it took over.
        took = await store.claim(SCOPE, "a", FP1, "new", self.LEASE, keep_lapsed=keep)
        assert took.claimed and took.existing is None and took.lapsed is not None
        assert (took.lapsed.status, took.lapsed.owner, took.lapsed.fingerprint) == (
            Status.LAPSED,
            "oa",
            FP1,
        )
        assert took.lapsed.claimed_at == record.claimed_at
        assert took.lapsed.lapsed_at == record.lapsed_at
        # The take-over sent again (its answer lost) is answered as it was the first time.
        again = await store.claim(SCOPE, "a", FP1, "new", self.LEASE, keep_lapsed=keep)
        assert again.claimed and again.existing is None and again.lapsed is not None
        assert (again.lapsed.status, again.lapsed.owner, again.lapsed.fingerprint) == (
            Status.LAPSED,
            "oa",
            FP1,
        )
        assert (again.lapsed.claimed_at, again.lapsed.lapsed_at) == (
            record.claimed_at,
            record.lapsed_at,
        )
        self.assert_remaining(again.lapsed, took.lapsed.remaining)
        await self.in_progress(store, "a", "new")
        assert not await store.complete(SCOPE, "a", "oa", b"{}", self.RETENTION, fingerprint=FP1)
        # A lapsed claim's own owner may still complete it (late completion).
        assert await store.complete(SCOPE, "b", "ob", OUTCOME, self.RETENTION, fingerprint=FP1)
        done = await store.get(SCOPE, "b")
        assert done is not None and (done.status, done.outcome) == (Status.COMPLETED, OUTCOME)
        # Once its keep is over, a lapsed claim is dropped: a free key.
        await self.advance(keep)
        assert await store.get(SCOPE, "c") is None
        assert await store.claim(SCOPE, "c", FP2, "oc2", self.LEASE) == Claim(claimed=True)

    async def test_release_to_lapsed(self) -> None:
        store = await self.open()
        keep = self.RETENTION
        assert (await store.claim(SCOPE, "k", FP1, "o1", self.LEASE, keep_lapsed=keep)).claimed
        assert await store.release(SCOPE, "k", "intruder", lapse=True) is False
        assert await store.release(SCOPE, "k", "o1", lapse=True) is True
        record = await store.get(SCOPE, "k")
        assert record is not None and (record.status, record.owner) == (Status.LAPSED, "o1")
        self.assert_remaining(record, keep)
        assert await store.release(SCOPE, "k", "o1", lapse=True) is False  # not held any more
        took = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE, keep_lapsed=keep)
        assert took.claimed and took.lapsed is not None and took.lapsed.owner == "o1"
        # Without a keep, releasing to lapsed frees the key, as a release does.
        assert (await store.claim(SCOPE, "n", FP1, "o3", self.LEASE)).claimed
        assert await store.release(SCOPE, "n", "o3", lapse=True) is True
        assert await store.get(SCOPE, "n") is None

    async def test_release_frees_a_lapsed_claim(self) -> None:
        # An operator's release (`idemtools keys release`, fenced by the owner it read) of a
        # lapsed claim: the deliberate way to let the next claim run the tool again.
        store = await self.open(max_records_per_scope=2)
        keep = self.LONG
        for key, owner in (("a", "oa"), ("b", "ob")):
            claim = await store.claim(SCOPE, key, FP1, owner, self.LEASE, keep_lapsed=keep)
            assert claim.claimed
        await self.advance(self.LEASE * 1.5)
        lapsed = await store.get(SCOPE, "a")
        assert lapsed is not None and (lapsed.status, lapsed.owner) == (Status.LAPSED, "oa")
        assert await store.release(SCOPE, "a", "intruder") is False  # fenced by owner
        assert await store.release(OTHER_SCOPE, "a", "oa") is False
        assert await store.release(SCOPE, "a", "oa", lapse=True) is False  # lapsed already
        still = await store.get(SCOPE, "a")
        assert still is not None and (still.status, still.owner) == (Status.LAPSED, "oa")
        assert await store.release(SCOPE, "a", "oa") is True
        assert await store.get(SCOPE, "a") is None
        assert await store.release(SCOPE, "a", "oa") is False  # gone: a re-sent release
        # The key is free: a claim of any fingerprint is a fresh one, nothing taken over; and
        # the released record stopped counting in the scope's quota ("b" still counts).
        fresh = await store.claim(SCOPE, "a", FP2, "new", self.LEASE, keep_lapsed=keep)
        assert fresh == Claim(claimed=True)
        await self.in_progress(store, "a", "new")
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)
        # A claim that took a lapsed one over and gave it back (`lapse=True`: its reconcile
        # could not decide) is held by the one that gave it back.
        took = await store.claim(SCOPE, "b", FP1, "ob2", self.LEASE, keep_lapsed=keep)
        assert took.claimed and took.lapsed is not None and took.lapsed.owner == "ob"
        assert await store.release(SCOPE, "b", "ob2", lapse=True) is True
        back = await store.get(SCOPE, "b")
        assert back is not None and (back.status, back.owner) == (Status.LAPSED, "ob2")
        assert await store.release(SCOPE, "b", "ob") is False
        assert await store.release(SCOPE, "b", "ob2") is True
        assert await store.get(SCOPE, "b") is None

    async def test_lapsed_claims_count_in_bounds(self) -> None:
        store = await self.open(max_records=2, max_records_per_scope=1)
        keep = self.LONG
        assert (await store.claim(SCOPE, "a", FP1, "oa", self.LEASE, keep_lapsed=keep)).claimed
        assert (await store.claim(OTHER_SCOPE, "b", FP1, "ob", self.LEASE)).claimed
        await self.advance(self.LEASE * 1.5)
        # "a" lapsed and still counts (store and scope); "b" had no keep and is gone.
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)
        assert (await store.claim(OTHER_SCOPE, "d", FP1, "od", self.LEASE)).claimed
        with pytest.raises((StoreFullError, QuotaExceededError)):
            await store.claim("scope-c", "e", FP1, "oe", self.LEASE)
        # Taking a lapsed claim over needs no room: it is the same record.
        took = await store.claim(SCOPE, "a", FP1, "oa2", self.LEASE, keep_lapsed=keep)
        assert took.claimed and took.lapsed is not None

    async def test_lapsed_claims_count_in_the_quota(self) -> None:
        # The per-caller quota alone: the bound every store has (Redis and PostgreSQL have
        # no record count).
        store = await self.open(max_records_per_scope=1)
        keep = self.LONG
        assert (await store.claim(SCOPE, "a", FP1, "oa", self.LEASE, keep_lapsed=keep)).claimed
        assert (await store.claim(OTHER_SCOPE, "b", FP1, "ob", self.LEASE)).claimed
        await self.advance(self.LEASE * 1.5)
        with pytest.raises(QuotaExceededError):  # "a" lapsed, and still counts
            await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)
        assert (await store.claim(OTHER_SCOPE, "d", FP1, "od", self.LEASE)).claimed  # no keep
        took = await store.claim(SCOPE, "a", FP1, "oa2", self.LEASE, keep_lapsed=keep)
        assert took.claimed and took.lapsed is not None  # the same record: no room needed

    # -- time ------------------------------------------------------------------------------

    async def test_lease_expiry_makes_key_claimable(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE / 2)
        held = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)
        assert held.claimed is False  # still within the lease
        await self.advance(self.LEASE)  # 1.5 leases in total
        assert await store.get(SCOPE, "k") is None
        assert (await store.claim(SCOPE, "k", FP2, "o2", self.LEASE)).claimed
        await self.in_progress(store, "k", "o2")

    async def test_retention_expiry_makes_key_claimable(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION)
        await self.advance(self.RETENTION / 2)
        replay = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)
        assert replay.claimed is False
        assert replay.existing is not None and replay.existing.outcome == OUTCOME
        await self.advance(self.RETENTION)  # 1.5 retentions in total
        assert await store.get(SCOPE, "k") is None
        assert (await store.claim(SCOPE, "k", FP2, "o2", self.LEASE)).claimed
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert (record.status, record.fingerprint, record.outcome) == (
            Status.IN_PROGRESS,
            FP2,
            None,
        )

    async def test_retention_starts_at_completion(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE / 2)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION)
        await self.advance(self.RETENTION - self.LEASE / 4)  # past claim + retention
        record = await store.get(SCOPE, "k")
        assert record is not None and record.status is Status.COMPLETED
        self.assert_remaining(record, self.LEASE / 4)

    async def test_renew_extends_lease(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE * 0.75)
        assert await store.renew(SCOPE, "k", "o1", self.LEASE) is True
        record = await store.get(SCOPE, "k")
        assert record is not None
        self.assert_remaining(record, self.LEASE)  # renewed from now, not from the claim
        await self.advance(self.LEASE * 0.75)  # 1.5 leases after the claim: alive by renewal
        await self.in_progress(store, "k", "o1")
        assert (await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)).claimed is False
        assert await store.renew(SCOPE, "k", "o1", self.LEASE) is True
        await self.advance(self.LEASE * 0.75)
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION) is True

    async def test_unrenewed_claim_expires_after_renewal(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await self.advance(self.LEASE / 2)
        assert await store.renew(SCOPE, "k", "o1", self.LEASE)
        await self.advance(self.LEASE * 1.25)
        assert await store.get(SCOPE, "k") is None
        assert await store.renew(SCOPE, "k", "o1", self.LEASE) is False

    # -- release ---------------------------------------------------------------------------

    async def test_release_deletes(self) -> None:
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.release(SCOPE, "k", "o1") is True
        assert await store.get(SCOPE, "k") is None
        assert await store.release(SCOPE, "k", "o1") is False
        assert await store.complete(SCOPE, "k", "o1", OUTCOME, self.RETENTION) is False
        assert (await store.claim(SCOPE, "k", FP2, "o2", self.LEASE)).claimed
        await self.in_progress(store, "k", "o2")

    # -- capacity --------------------------------------------------------------------------

    async def _fill(self, store: LapsingStore, n: int, *, lease: float) -> None:
        for i in range(n):
            assert (await store.claim(SCOPE, f"k{i}", FP1, f"o{i}", lease)).claimed

    async def test_full_store_refuses_new_claims_and_keeps_records(self) -> None:
        store = await self.open(max_records=3)
        await self._fill(store, 2, lease=self.LONG)
        assert (await store.claim(SCOPE, "done", FP1, "od", self.LEASE)).claimed
        assert await store.complete(SCOPE, "done", "od", OUTCOME, self.LONG)  # completed counts
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "new", FP1, "on", self.LEASE)
        with pytest.raises(StoreFullError):
            await store.claim(OTHER_SCOPE, "k0", FP1, "on", self.LEASE)
        assert await store.get(SCOPE, "new") is None
        for i in range(2):
            await self.in_progress(store, f"k{i}", f"o{i}")
        done = await store.get(SCOPE, "done")
        assert done is not None and done.outcome == OUTCOME
        # A key that is already live is still answered, full or not.
        again = await store.claim(SCOPE, "k0", FP1, "on", self.LEASE)
        assert again.claimed is False and again.existing is not None
        assert again.existing.owner == "o0"
        replay = await store.claim(SCOPE, "done", FP1, "on", self.LEASE)
        assert replay.existing is not None and replay.existing.outcome == OUTCOME

    async def test_expired_records_free_room(self) -> None:
        store = await self.open(max_records=3)
        assert (await store.claim(SCOPE, "short", FP1, "os", self.LEASE)).claimed
        await self._fill(store, 2, lease=self.LONG)
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "new", FP1, "on", self.LEASE)
        await self.advance(self.LEASE * 1.5)
        assert (await store.claim(SCOPE, "new", FP1, "on", self.LEASE)).claimed
        for i in range(2):
            await self.in_progress(store, f"k{i}", f"o{i}")
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "newer", FP1, "on", self.LEASE)

    async def test_expired_completed_records_free_room(self) -> None:
        store = await self.open(max_records=2)
        await store.claim(SCOPE, "a", FP1, "oa", self.LEASE)
        assert await store.complete(SCOPE, "a", "oa", OUTCOME, self.RETENTION)
        await store.claim(SCOPE, "b", FP1, "ob", self.LONG)
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)
        await self.advance(self.RETENTION * 1.5)
        assert (await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)).claimed
        await self.in_progress(store, "b", "ob")

    async def test_released_records_free_room(self) -> None:
        store = await self.open(max_records=2)
        await self._fill(store, 2, lease=self.LONG)
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "new", FP1, "on", self.LEASE)
        assert await store.release(SCOPE, "k0", "o0")
        assert (await store.claim(SCOPE, "new", FP1, "on", self.LEASE)).claimed
        await self.in_progress(store, "k1", "o1")

    # -- per-scope quota -------------------------------------------------------------------
    # One caller (scope) flooding unique keys must be stopped at its own quota without locking
    # anyone else out. Live records count whether in progress or completed; expired and
    # released ones do not.

    async def test_quota_refuses_the_flooding_scope_only(self) -> None:
        store = await self.open(max_records_per_scope=3)
        await self._fill(store, 2, lease=self.LEASE)  # in progress
        assert (await store.claim(SCOPE, "done", FP1, "od", self.LEASE)).claimed
        assert await store.complete(SCOPE, "done", "od", OUTCOME, self.RETENTION)
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "new", FP1, "on", self.LEASE)
        assert await store.get(SCOPE, "new") is None
        # Everyone else claims on, up to their own quota.
        for i in range(3):
            assert (await store.claim(OTHER_SCOPE, f"k{i}", FP1, f"x{i}", self.LEASE)).claimed
        with pytest.raises(QuotaExceededError):
            await store.claim(OTHER_SCOPE, "k3", FP1, "x3", self.LEASE)
        # Live keys of the flooding scope are still answered: a retry is never refused.
        again = await store.claim(SCOPE, "k0", FP1, "on", self.LEASE)
        assert again.claimed is False and again.existing is not None
        assert again.existing.owner == "o0"
        replay = await store.claim(SCOPE, "done", FP1, "on", self.LEASE)
        assert replay.existing is not None and replay.existing.outcome == OUTCOME
        # Once its records expire, the flooding scope claims again.
        await self.advance(self.RETENTION * 1.5)
        for i in range(3):
            assert (await store.claim(SCOPE, f"n{i}", FP1, f"n{i}", self.LEASE)).claimed
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "n3", FP1, "n3", self.LEASE)

    async def test_quota_counts_completed_records_until_retention_ends(self) -> None:
        store = await self.open(max_records_per_scope=2)
        for key in ("a", "b"):
            assert (await store.claim(SCOPE, key, FP1, f"o{key}", self.LEASE)).claimed
            assert await store.complete(SCOPE, key, f"o{key}", OUTCOME, self.RETENTION)
        await self.advance(self.LEASE * 1.5)  # past both leases, within retention
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)
        await self.advance(self.RETENTION)  # 1.5 leases + 1 retention after completion
        assert (await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)).claimed

    async def test_quota_counts_renewed_claims(self) -> None:
        store = await self.open(max_records_per_scope=1)
        assert (await store.claim(SCOPE, "a", FP1, "oa", self.LEASE)).claimed
        for _ in range(3):  # alive for 2.25 leases, by renewal only
            await self.advance(self.LEASE * 0.75)
            assert await store.renew(SCOPE, "a", "oa", self.LEASE)
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "b", FP1, "ob", self.LEASE)
        await self.advance(self.LEASE * 1.5)  # no more renewals: the claim ends
        assert (await store.claim(SCOPE, "b", FP1, "ob", self.LEASE)).claimed

    async def test_quota_freed_by_release(self) -> None:
        store = await self.open(max_records_per_scope=2)
        await self._fill(store, 2, lease=self.LONG)
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "new", FP1, "on", self.LEASE)
        assert await store.release(SCOPE, "k0", "o0")
        assert (await store.claim(SCOPE, "new", FP1, "on", self.LEASE)).claimed
        with pytest.raises(QuotaExceededError):
            await store.claim(SCOPE, "newer", FP1, "on", self.LEASE)

    async def test_quota_holds_under_concurrent_claims(self) -> None:
        quota = 5
        store = await self.open(max_records_per_scope=quota)
        claimed: list[str] = []
        refused: list[str] = []

        async def one(i: int) -> None:
            try:
                if (await store.claim(SCOPE, f"k{i}", FP1, f"o{i}", self.LONG)).claimed:
                    claimed.append(f"k{i}")
            except QuotaExceededError:
                refused.append(f"k{i}")

        async with anyio.create_task_group() as tg:
            for i in range(self.CONCURRENCY):
                tg.start_soon(one, i)
        assert len(claimed) == quota, claimed
        assert len(refused) == self.CONCURRENCY - quota
        for key in refused:
            assert await store.get(SCOPE, key) is None

    # -- byte budget -----------------------------------------------------------------------
    # The budget is hard: an outcome that does not fit is kept as a small
    # tombstone instead (every claim keeps room for one), so the retry is refused with
    # `idempotency_outcome_not_kept` and never runs the tool a second time.

    BUDGET: ClassVar[int] = 64 * 1024

    async def test_byte_budget_keeps_a_tombstone_for_an_outcome_that_does_not_fit(self) -> None:
        store = await self.open(max_bytes=self.BUDGET)
        big = b'{"v":1,"result":{"t":"' + b"x" * (self.BUDGET * 5 // 8) + b'"}}'  # 5/8
        for key in ("a", "b"):
            assert (await store.claim(SCOPE, key, FP1, f"o{key}", self.LEASE)).claimed
        assert await store.complete(SCOPE, "a", "oa", big, self.RETENTION)
        # "b" does not fit beside "a": recorded, as a tombstone.
        assert await store.complete(SCOPE, "b", "ob", big, self.RETENTION)
        kept = await store.get(SCOPE, "a")
        assert kept is not None and kept.outcome == big
        gone = await store.get(SCOPE, "b")
        assert gone is not None and gone.status is Status.COMPLETED and gone.fingerprint == FP1
        assert gone.outcome is not None and is_tombstone(gone.outcome)
        assert len(gone.outcome) <= TOMBSTONE_RESERVE
        with pytest.raises(OutcomeNotKeptError):
            Outcome.from_bytes(gone.outcome, key="b")
        retry = await store.claim(SCOPE, "b", FP1, "on", self.LEASE)  # answered, never claimed
        assert not retry.claimed and retry.existing is not None
        assert retry.existing.outcome == gone.outcome
        assert (await store.claim(SCOPE, "c", FP1, "oc", self.LEASE)).claimed  # room is left
        await self.advance(self.RETENTION * 1.5)
        assert (await store.claim(SCOPE, "b", FP1, "ob2", self.LEASE)).claimed

    async def test_every_claim_keeps_room_for_its_tombstone(self) -> None:
        # Fill the budget with claims alone, then complete them all with outcomes that cannot
        # fit: each one is recorded (as a tombstone), none is lost.
        budget = 16 * 1024
        store = await self.open(max_bytes=budget)
        keys: list[str] = []
        with pytest.raises(StoreFullError):
            for i in range(budget):
                await store.claim(SCOPE, f"k{i:05d}", FP1, f"o{i:05d}", self.LONG)
                keys.append(f"k{i:05d}")
        big = b'"' + b"x" * budget + b'"'
        for key in keys:
            assert await store.complete(SCOPE, key, "o" + key[1:], big, self.LONG), key
        for key in keys:
            record = await store.get(SCOPE, key)
            assert record is not None and record.outcome is not None
            assert is_tombstone(record.outcome), key

    async def test_byte_budget_counts_every_record(self) -> None:
        # Records without an outcome cost bytes too (the store's per-record estimate): a
        # flood of claims meets the budget long before any record-count bound.
        budget = 16 * 1024
        store = await self.open(max_bytes=budget)
        claimed = 0
        with pytest.raises(StoreFullError):  # the loop fills the store until it refuses
            for i in range(budget):  # every key and owner of one length: records of one size
                await store.claim(SCOPE, f"k{i:05d}", FP1, f"o{i:05d}", self.LONG)
                claimed += 1
        assert 4 <= claimed < budget // 64, claimed
        assert await store.release(SCOPE, "k00000", "o00000")  # released bytes are free again
        assert (await store.claim(SCOPE, "x00000", FP1, "y00000", self.LEASE)).claimed
        with pytest.raises(StoreFullError):
            await store.claim(SCOPE, "x00001", FP1, "y00001", self.LEASE)

    # -- scopes and keys -------------------------------------------------------------------

    async def test_scopes_are_independent(self) -> None:
        store = await self.open()
        assert (await store.claim(SCOPE, "k", FP1, "oa", self.LEASE)).claimed
        assert (await store.claim(OTHER_SCOPE, "k", FP2, "ob", self.LEASE)).claimed
        assert await store.complete(SCOPE, "k", "oa", OUTCOME, self.RETENTION)
        await self.in_progress(store, "k", "ob", scope=OTHER_SCOPE)
        # An owner of one scope's record holds nothing in the other.
        assert await store.complete(OTHER_SCOPE, "k", "oa", OUTCOME, self.RETENTION) is False
        assert await store.release(OTHER_SCOPE, "k", "ob") is True
        record = await store.get(SCOPE, "k")
        assert record is not None and record.outcome == OUTCOME
        assert await store.get(OTHER_SCOPE, "k") is None

    async def test_scope_and_key_do_not_run_together(self) -> None:
        # A store joining scope and key with a separator must not let these meet.
        store = await self.open()
        assert (await store.claim("a\x1fb", "c", FP1, "o1", self.LEASE)).claimed
        assert (await store.claim("a", "b\x1fc", FP2, "o2", self.LEASE)).claimed
        assert (await store.claim("a:b", "c", FP1, "o3", self.LEASE)).claimed
        assert (await store.claim("a", "b:c", FP2, "o4", self.LEASE)).claimed
        await self.in_progress(store, "c", "o1", scope="a\x1fb")
        await self.in_progress(store, "b\x1fc", "o2", scope="a")

    @pytest.mark.parametrize("name", sorted(KEYS))
    async def test_unusual_keys(self, name: str) -> None:
        key = KEYS[name]
        store = await self.open()
        assert (await store.claim(SCOPE, key, FP1, "o1", self.LEASE)).claimed
        assert await store.get(SCOPE, key + "x") is None
        assert await store.complete(SCOPE, key, "o1", OUTCOME, self.RETENTION)
        record = await store.get(SCOPE, key)
        assert record is not None and record.outcome == OUTCOME

    async def test_keys_compare_exactly(self) -> None:
        store = await self.open()
        keys = ["\u00e9", "e\u0301", "K", "k", "k ", "x\ud800", "x\ud801"]
        for i, key in enumerate(keys):
            assert (await store.claim(SCOPE, key, FP1, f"o{i}", self.LEASE)).claimed, key
        for i, key in enumerate(keys):
            await self.in_progress(store, key, f"o{i}")

    # -- outcomes --------------------------------------------------------------------------

    @pytest.mark.parametrize("name", sorted(OUTCOMES))
    async def test_outcome_round_trips_exactly(self, name: str) -> None:
        outcome = OUTCOMES[name]
        store = await self.open()
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        assert await store.complete(SCOPE, "k", "o1", outcome, self.RETENTION)
        record = await store.get(SCOPE, "k")
        assert record is not None
        assert type(record.outcome) is bytes
        assert record.outcome == outcome
        claim = await store.claim(SCOPE, "k", FP1, "o2", self.LEASE)
        assert claim.existing is not None and claim.existing.outcome == outcome

    # -- concurrency -----------------------------------------------------------------------

    async def test_concurrent_claims_have_one_winner(self) -> None:
        store = await self.open()
        results: dict[str, Claim] = {}

        async def one(owner: str) -> None:
            results[owner] = await store.claim(SCOPE, "k", FP1, owner, self.LEASE)

        async with anyio.create_task_group() as tg:
            for i in range(self.CONCURRENCY):
                tg.start_soon(one, f"o{i}")
        winners = [owner for owner, claim in results.items() if claim.claimed]
        assert len(results) == self.CONCURRENCY
        assert len(winners) == 1
        for claim in results.values():
            if not claim.claimed:
                assert claim.existing is not None and claim.existing.owner == winners[0]
        await self.in_progress(store, "k", winners[0])

    # -- lifecycle -------------------------------------------------------------------------

    async def test_aclose_twice_is_harmless(self) -> None:
        store = await self.make_store(self.clock)
        await store.claim(SCOPE, "k", FP1, "o1", self.LEASE)
        await store.aclose()
        await store.aclose()
