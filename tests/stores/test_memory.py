"""MemoryStore against the shared store conformance suite."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.errors import QuotaExceededError, RefusedError, StoreFullError
from idemtools.outcome import TOMBSTONE_RESERVE
from idemtools.stores.base import LapsingStore
from idemtools.stores.memory import MemoryStore, _pack, _scope_of
from tests.budget import examples

from ._memory_two_tables import MemoryStore as TwoTableMemoryStore
from .conformance import FakeClock, StoreConformance
from .flood import flood_scenario


class TestMemoryStore(StoreConformance):
    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        bounds: dict[str, int] = {}
        if max_records is not None:
            bounds["max_records"] = max_records
        if max_bytes is not None:
            bounds["max_bytes"] = max_bytes
        # The suite tests each bound alone: no per-scope share unless it asks for a quota.
        return MemoryStore(
            clock=clock,
            max_records_per_scope=max_records_per_scope,
            max_bytes_per_scope=None,
            **bounds,
        )


async def test_flood_one_scope_others_unaffected() -> None:
    await flood_scenario(MemoryStore(max_records_per_scope=5), 5)


# -- the one table: accounting under any interleaving -----------------------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "claim",
                "claim-keep",
                "renew",
                "complete",
                "release",
                "release-lapse",
                "len",
                "advance",
            ]
        ),
        st.integers(0, 5),  # which key (keys 0-2 in scope A, 3-5 in scope B)
        st.integers(1, 40),  # seconds, for "advance"
        st.sampled_from([b'{"v":1,"result":{}}', b"x" * 700]),  # an outcome, for "complete"
    ),
    max_size=60,
)


def _run(coro: Any) -> Any:
    # MemoryStore's operations never suspend: drive them without an event loop.
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a MemoryStore operation suspended")


@settings(max_examples=examples(150), deadline=None)
@given(
    ops=_OPS,
    quota=st.sampled_from([None, 2]),
    share=st.sampled_from([None, "share", 1500]),
    max_bytes=st.sampled_from([256 << 20, 2000]),
)
def test_accounting_matches_what_is_held(
    ops: list[tuple[str, int, int, bytes]], quota: int | None, share: Any, max_bytes: int
) -> None:
    """Bytes, per-scope counts and the expiry heap always agree with the records actually held
    (claims, lapsed claims, completed records and tombstones, in one table), through claims,
    renewals, completions, releases and expiry."""
    clock = FakeClock()
    store = MemoryStore(
        clock=clock,
        max_records=4,
        max_bytes=max_bytes,
        max_records_per_scope=quota,
        max_bytes_per_scope=share,
    )
    owners: dict[int, str] = {}
    most = 0  # the most records held at once
    for op, i, seconds, outcome in ops:
        scope, key = ("a" * 64 if i < 3 else "b" * 64), f"k{i}"
        owner = owners.setdefault(i, f"{i:032x}")
        try:
            if op in ("claim", "claim-keep"):
                keep = 20.0 if op == "claim-keep" else 0.0
                _run(store.claim(scope, key, "f" * 64, owner, 30.0, keep_lapsed=keep))
            elif op == "renew":
                _run(store.renew(scope, key, owner, 30.0))
            elif op == "complete":
                _run(store.complete(scope, key, owner, outcome, 60.0, fingerprint="f" * 64))
            elif op in ("release", "release-lapse"):
                _run(store.release(scope, key, owner, lapse=op == "release-lapse"))
            else:
                clock.advance(seconds)
        except (StoreFullError, QuotaExceededError):
            pass
        entries = store._entries
        # Each claim also holds the room its tombstone may need (a hard budget); a completed
        # record (a tombstone too) its outcome.
        sizes = {
            rid: e.base + (TOMBSTONE_RESERVE if e.outcome is None else len(e.outcome))
            for rid, e in entries.items()
        }
        assert store._bytes == store.bytes_used == sum(sizes.values())
        # Stale heap entries stay bounded: the heap is rebuilt before it passes twice the most
        # records held (the bound holds at the push; removals since leave the heap as it is).
        most = max(most, len(entries))
        assert len(store._heap) <= 2 * most + 17
        # Every record has a heap entry at or before its expiry (a lease that ran out: before
        # its keep's end), so expiry finds it, and a completion need not push one.
        first: dict[bytes, float] = {}
        for at, rid in store._heap:
            first[rid] = min(at, first.get(rid, at))
        now = clock()
        for rid, e in entries.items():
            assert first[rid] <= (e.expires if e.expires > now else e.until())
        # Per scope (with a per-scope bound only): the records present, the bytes they count.
        present: dict[bytes, int] = {}
        scope_bytes: dict[bytes, int] = {}
        for rid, size in sizes.items():
            present[_scope_of(rid)] = present.get(_scope_of(rid), 0) + 1
            scope_bytes[_scope_of(rid)] = scope_bytes.get(_scope_of(rid), 0) + size
        if quota is None and share is None:
            assert store._scopes == {}
        else:
            assert {sid: c.records for sid, c in store._scopes.items()} == present
            assert {sid: c.bytes for sid, c in store._scopes.items()} == scope_bytes
        if op == "len":  # only now: the other checks run with expired records still held too
            now = clock()
            live = sum(1 for e in entries.values() if e.status(now) is not None)
            assert len(store) == live
            assert all(e.until() > now for e in store._entries.values())  # the rest expired


def _pack_by_round_trip(fingerprint: str, owner: str) -> Any:
    """What `_pack` computed with `bytes.fromhex` and a `hex()` round trip."""
    if len(fingerprint) == 64 and len(owner) == 32:
        text = fingerprint + owner
        try:
            raw = bytes.fromhex(text)
        except ValueError:
            return (fingerprint, owner)
        if raw.hex() == text:
            return raw
    return (fingerprint, owner)


def _near_hex(size: int) -> Any:
    # Mostly lowercase hex of the right length, sometimes upper case, spaces or non-ASCII.
    chars = st.sampled_from("0123456789abcdef0123456789abcdefABCF \u00e9\u0660")
    exact = st.text(st.sampled_from("0123456789abcdef"), min_size=size, max_size=size)
    return exact | st.text(chars, min_size=size - 1, max_size=size + 1)


@settings(max_examples=examples(300), deadline=None)
@given(fingerprint=_near_hex(64), owner=_near_hex(32))
def test_pack_is_the_round_trip(fingerprint: str, owner: str) -> None:
    """`_pack`, and its copy inline in `claim`, pack exactly what the round trip packed."""
    assert _pack(fingerprint, owner) == _pack_by_round_trip(fingerprint, owner)
    store = MemoryStore()
    _run(store.claim("s" * 64, "k", fingerprint, owner, 30.0))
    (entry,) = store._entries.values()
    assert entry.meta == _pack_by_round_trip(fingerprint, owner)
    record = _run(store.get("s" * 64, "k"))
    assert (record.fingerprint, record.owner) == (fingerprint, owner)


def test_a_kept_outcome_costs_its_own_size_not_its_writers_buffer() -> None:
    # orjson's `dumps` (how `Outcome.to_bytes` writes) returns bytes that keep its whole write
    # buffer (4 KiB at least): kept as given, 1,000 small records held ~4.5 MB where
    # `max_bytes` counted ~0.5 MB (and every keyed call took a page fault).
    import tracemalloc

    from idemtools import Outcome

    store = MemoryStore(max_records_per_scope=None, max_bytes_per_scope=None)
    owners = [f"{i:032x}" for i in range(1000)]
    for i, owner in enumerate(owners):
        _run(store.claim("s" * 64, f"k{i}", "f" * 64, owner, 30.0))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i, owner in enumerate(owners):
            data = Outcome(result={"content": [{"type": "text", "text": str(i)}]}).to_bytes()
            assert _run(store.complete("s" * 64, f"k{i}", owner, data, 60.0, fingerprint="f" * 64))
        del data  # the store holds what it keeps; the writer's bytes go
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown / 1000 < 600, f"{grown / 1000:.0f} bytes per kept outcome"
    record = _run(store.get("s" * 64, "k7"))
    assert record is not None and Outcome.from_bytes(record.outcome).result == {
        "content": [{"type": "text", "text": "7"}]
    }


# -- the same answers as the store it replaced ---------------------------------------------

_SCOPES = ["a" * 64, "b" * 64, "plain"]  # two packed scope ids, one not
_KEYS = ["k0", "k1", "k2"]
_FPS = ["f" * 64, "fp"]  # packed, not
# From a few bytes to past every byte bound below: some outcomes become tombstones; two cost
# what their claim did (the room it held for a tombstone), and a byte more.
_OUTCOMES = [
    b"{}",
    b"z" * TOMBSTONE_RESERVE,
    b"w" * (TOMBSTONE_RESERVE + 1),
    b"x" * 300,
    b"y" * 3000,
]

_ACTS = [
    "claim",
    "claim-keep",
    "claim-again",  # a recent claim's owner claims (again) with its fingerprint
    "renew",
    "complete",
    "complete-nofp",
    "complete-replaceable",
    "release",
    "release-lapse",
    "get",
    "len",
    "advance",
]
_ACT = st.tuples(
    st.sampled_from(_ACTS),
    st.integers(0, len(_SCOPES) - 1),
    st.integers(0, len(_KEYS) - 1),
    st.integers(0, 4),  # whose: a recent claim's owner (on its own key when even), 4 an intruder
    st.sampled_from([0.0, 1.0, 10.0, 60.0]),  # lease, retention or time passing
    st.integers(0, len(_OUTCOMES) - 1),  # which fingerprint (claims) or outcome (completions)
)
# Each bound mostly off (or roomy), else tight enough to be met within a few operations; 934
# bytes is exactly two claims with packed ids, owners and fingerprints (met to the byte).
_PACKED_CLAIM = 320 + 33 + len("k0") + 48 + TOMBSTONE_RESERVE
_BOUND_CHOICES: dict[str, list[Any]] = {
    "max_records": [100_000, 100_000, 3, 6],
    "max_bytes": [1 << 30, 1 << 30, 1500, 4000, 2 * _PACKED_CLAIM],
    "max_records_per_scope": [None, None, "share", 1, 3],
    "max_bytes_per_scope": [None, None, "share", 800, 2500, 2 * _PACKED_CLAIM],
}
_BOUNDS = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in _BOUND_CHOICES.items()})


def _answer(coro: Any) -> Any:
    """What an operation answered: its value, or the refusal it raised (kind and words)."""
    try:
        return _run(coro)
    except RefusedError as exc:
        return (type(exc).__name__, str(exc))


def _same_answers(
    ops: list[tuple[str, int, int, int, float, int]],
    bounds: dict[str, Any],
    *,
    packed_only: bool = False,
) -> None:
    """Every answer (claims, records read back, booleans, refusals), `len` and the outcomes not
    kept are those of the store with claims and completed records in two tables; after `len`
    (both hold only live records then) the bytes they count agree too."""
    clock = FakeClock()
    two, one = TwoTableMemoryStore(clock=clock, **bounds), MemoryStore(clock=clock, **bounds)
    stores = (two, one)
    claimed: list[tuple[str, str, str, str]] = []  # (owner, fingerprint, scope, key)
    trace: list[str] = [str(bounds)]
    for n, (op, s, k, who, seconds, v) in enumerate(ops):
        scope, key = _SCOPES[s], _KEYS[k]
        trace.append(f"{op} {s} {k} {who} {seconds} {v}")
        if op == "advance":
            clock.advance(seconds)
            continue
        if op in ("claim", "claim-keep"):
            owner, fp = (f"{n:032x}" if n % 3 else f"owner-{n}"), _FPS[v % len(_FPS)]
            if packed_only:  # every claim the same size
                owner, fp, scope = f"{n:032x}", _FPS[0], _SCOPES[s % 2]
        elif who < 4 and who // 2 < len(claimed):
            owner, fp, own_scope, own_key = claimed[-1 - who // 2]
            if who % 2 == 0:
                scope, key = own_scope, own_key
        else:
            owner, fp = "e" * 32, _FPS[v % len(_FPS)]
        if op in ("claim", "claim-keep", "claim-again"):
            keep = 0.0 if op == "claim" else 15.0
            answers = [
                _answer(x.claim(scope, key, fp, owner, seconds, keep_lapsed=keep)) for x in stores
            ]
            if op != "claim-again" and getattr(answers[0], "claimed", False):
                claimed.append((owner, fp, scope, key))
        elif op == "renew":
            answers = [_answer(x.renew(scope, key, owner, seconds)) for x in stores]
        elif op.startswith("complete"):
            given_fp = None if op == "complete-nofp" else fp
            replaceable = op == "complete-replaceable"
            answers = [
                _answer(
                    x.complete(
                        scope,
                        key,
                        owner,
                        _OUTCOMES[v],
                        seconds,
                        fingerprint=given_fp,
                        replaceable=replaceable,
                    )
                )
                for x in stores
            ]
        elif op.startswith("release"):
            lapse = op == "release-lapse"
            answers = [_answer(x.release(scope, key, owner, lapse=lapse)) for x in stores]
        elif op == "get":
            answers = [_answer(x.get(scope, key)) for x in stores]
        else:
            answers = [len(x) for x in stores]
            assert two.bytes_used == one.bytes_used, "\n".join(trace)
        assert answers[0] == answers[1], "\n".join(trace)
        assert two.outcomes_not_kept == one.outcomes_not_kept, "\n".join(trace)
        # Every key read back agrees too (reads remove nothing: neither store is tidied up).
        for sc in _SCOPES:
            for ky in _KEYS:
                assert _run(two.get(sc, ky)) == _run(one.get(sc, ky)), "\n".join(trace)


@settings(max_examples=examples(400), deadline=None)
@given(ops=st.lists(_ACT, max_size=80), bounds=_BOUNDS)
def test_answers_as_the_two_table_store_it_replaced(
    ops: list[tuple[str, int, int, int, float, int]], bounds: dict[str, Any]
) -> None:
    _same_answers(ops, bounds)


@pytest.mark.parametrize("seed", range(30))
def test_answers_as_the_two_table_store_on_long_runs(seed: int) -> None:
    """Long runs drawn evenly (hypothesis favours short, simple ones): take-overs sent again,
    completions over completed records; and, with renewals many times as frequent as time
    passing, heaps rebuilt once stale entries outnumber live ones."""
    rng = random.Random(seed)
    acts = _ACTS + ["renew", "claim-again"] * 8 if seed % 2 else _ACTS
    ops = [
        (
            rng.choice(acts),
            rng.randrange(len(_SCOPES)),
            rng.randrange(2),  # two keys: they meet often
            rng.randrange(5),
            rng.choice([0.0, 1.0, 10.0, 60.0]),
            rng.randrange(len(_OUTCOMES)),
        )
        for _ in range(400)
    ]
    bounds = {k: rng.choice(v) for k, v in _BOUND_CHOICES.items()}
    _same_answers(ops, bounds)


def test_a_heap_of_stale_entries_is_rebuilt_by_the_next_claim() -> None:
    clock = FakeClock()
    store = MemoryStore(clock=clock, max_records_per_scope=None)
    for i in range(5):
        _run(store.claim("s" * 64, f"k{i}", "f" * 64, f"{i:032x}", 30.0))
    rebuilt = []
    for i in range(40):  # a released claim leaves its heap entry behind
        _run(store.claim("s" * 64, f"t{i}", "f" * 64, "e" * 32, 10.0))
        heap, entries = store._heap, store._entries
        assert len(heap) <= 2 * len(entries) + 17
        if i and sorted(heap) == sorted((e.until(), r) for r, e in entries.items()):
            rebuilt.append(i)  # nothing stale left
        assert _run(store.release("s" * 64, f"t{i}", "e" * 32))
    assert rebuilt
    _run(store.claim("s" * 64, "new", "f" * 64, "e" * 32, 10.0))
    clock.advance(20)  # the new claim's lease ends, the first five's do not
    assert [_run(store.get("s" * 64, k)) is None for k in ("k0", "k4", "new")] == [
        False,
        False,
        True,
    ]
    assert len(store) == 5


def test_a_completed_record_holds_one_heap_entry() -> None:
    """Completing (or renewing) a claim pushes no heap entry when it moves the record's expiry
    later: the claim's entry, when it comes up, is pushed again at the record's expiry. Claims
    kept lapsed as long as the retention, as the engine's are, included."""
    clock = FakeClock()
    store = MemoryStore(clock=clock, max_records_per_scope=None)
    for i in range(50):
        owner = f"{i:032x}"
        _run(store.claim("s" * 64, f"k{i}", "f" * 64, owner, 30.0, keep_lapsed=3600.0))
        assert _run(store.renew("s" * 64, f"k{i}", owner, 30.0))
        assert _run(store.complete("s" * 64, f"k{i}", owner, b"{}", 3600.0))
    assert len(store._heap) == 50
    clock.advance(31)  # the claims' leases end: their entries come up, pushed again at the end
    assert len(store) == 50 and len(store._heap) == 50
    assert [at for at, _ in store._heap] == [clock() - 31 + 3600] * 50
    clock.advance(3600 - 31)
    assert len(store) == 0 and store.bytes_used == 0
