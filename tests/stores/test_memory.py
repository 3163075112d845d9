"""MemoryStore against the shared store conformance suite."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.errors import QuotaExceededError, StoreFullError
from idemtools.outcome import TOMBSTONE_RESERVE
from idemtools.stores.base import LapsingStore
from idemtools.stores.memory import MemoryStore, _pack, _scope_of
from tests.budget import examples

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


# -- claims in progress (`_Claims`): accounting under any interleaving ------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["claim", "renew", "complete", "release", "advance"]),
        st.integers(0, 5),  # which key (keys 0-2 in scope A, 3-5 in scope B)
        st.integers(1, 40),  # seconds, for "advance"
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
@given(ops=_OPS, quota=st.sampled_from([None, 2]), share=st.sampled_from(["share", 1500]))
def test_claim_accounting_matches_what_is_held(
    ops: list[tuple[str, int, int]], quota: int | None, share: Any
) -> None:
    """Bytes, per-scope counts and the expiry heap of the claims in progress always agree with
    the claims actually held, through claims, renewals, completions, releases and expiry."""
    clock = FakeClock()
    store = MemoryStore(
        clock=clock, max_records=4, max_records_per_scope=quota, max_bytes_per_scope=share
    )
    owners: dict[int, str] = {}
    for op, i, seconds in ops:
        scope, key = ("a" * 64 if i < 3 else "b" * 64), f"k{i}"
        owner = owners.setdefault(i, f"{i:032x}")
        try:
            if op == "claim":
                _run(store.claim(scope, key, "f" * 64, owner, 30.0))
            elif op == "renew":
                _run(store.renew(scope, key, owner, 30.0))
            elif op == "complete":
                _run(store.complete(scope, key, owner, b'{"v":1,"result":{}}', 60.0))
            elif op == "release":
                _run(store.release(scope, key, owner))
            else:
                clock.advance(seconds)
        except (StoreFullError, QuotaExceededError):
            pass
        claims = store._running
        # Each claim also holds the room its tombstone may need (a hard budget).
        assert claims.bytes == sum(e.base + TOMBSTONE_RESERVE for e in claims.entries.values())
        assert len(claims.heap) <= 2 * len(claims.entries) + 17
        # every held claim has a heap entry at its current expiry, so expiry will find it
        assert all((e.expires, rid) in claims.heap for rid, e in claims.entries.items())
        # Per scope (on by default): the records present, and the bytes they count.
        present: dict[bytes, int] = {}
        sizes: dict[bytes, int] = {}
        held = [(rid, e.base + TOMBSTONE_RESERVE) for rid, e in claims.entries.items()]
        done_items = [(r, e.size()) for r, e in store._done.entries.items()]
        for rid, size in [*held, *done_items]:
            present[_scope_of(rid)] = present.get(_scope_of(rid), 0) + 1
            sizes[_scope_of(rid)] = sizes.get(_scope_of(rid), 0) + size
        assert store._scopes.records == present
        assert store._scopes.bytes == sizes
        now = clock()
        done = store._done
        live_claims = sum(1 for e in claims.entries.values() if e.expires > now)
        live_done = sum(1 for e in done.entries.values() if e.expires > now)
        assert len(store) == live_claims + live_done
        assert not any(e.expires <= now for e in claims.entries.values())  # len() expired them


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
    (entry,) = store._running.entries.values()
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
