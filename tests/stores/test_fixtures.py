"""The engine-test fixtures (tests/stores/fixtures.py) give what they say."""

from __future__ import annotations

from idemtools.stores.base import FullStore
from idemtools.stores.memory import MemoryStore
from idemtools.stores.reference import ReferenceStore

from .conformance import FakeClock
from .fixtures import any_store, new_store, reference_store, store_clock

__all__ = ["any_store", "reference_store", "store_clock"]  # fixtures, used by name below

SCOPE = "s"


async def test_reference_store_fixture_runs_on_the_fake_clock(
    reference_store: FullStore, store_clock: FakeClock
) -> None:
    assert isinstance(reference_store, ReferenceStore)
    assert (await reference_store.claim(SCOPE, "k", "f", "o", 10.0)).claimed
    store_clock.advance(10.0)
    assert await reference_store.get(SCOPE, "k") is None


async def test_any_store_runs_each_kind(any_store: FullStore, store_clock: FakeClock) -> None:
    assert type(any_store) in (ReferenceStore, MemoryStore)
    assert (await any_store.claim(SCOPE, "k", "f", "o", 10.0)).claimed
    store_clock.advance(5.0)
    record = await any_store.get(SCOPE, "k")
    assert record is not None and record.remaining == 5.0


def test_new_store_bounds_both_kinds_alike() -> None:
    for kind in ("reference", "memory"):
        store = new_store(kind, max_records=3, max_records_per_scope=2)
        info = store.info()
        assert (info.max_records, info.max_records_per_scope) == (3, 2)
