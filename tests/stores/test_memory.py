"""MemoryStore against the shared store conformance suite."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.errors import QuotaExceededError, StoreFullError
from idemtools.outcome import TOMBSTONE_RESERVE
from idemtools.stores.base import Store
from idemtools.stores.memory import MemoryStore, _scope_of, _sizeof

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
    ) -> Store:
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


@settings(max_examples=150, deadline=None)
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
        done_items = [(r, _sizeof(e)) for r, e in store._done.entries.items()]
        for rid, size in [*held, *done_items]:
            present[_scope_of(rid)] = present.get(_scope_of(rid), 0) + 1
            sizes[_scope_of(rid)] = sizes.get(_scope_of(rid), 0) + size
        assert store._per_scope == present
        assert store._scope_bytes == sizes
        now = clock()
        done = store._done
        live_claims = sum(1 for e in claims.entries.values() if e.expires > now)
        live_done = sum(1 for e in done.entries.values() if e.expires > now)
        assert len(store) == live_claims + live_done
        assert not any(e.expires <= now for e in claims.entries.values())  # len() expired them
