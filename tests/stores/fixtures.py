"""Stores for tests of the engine (and adapters): the reference store, and MemoryStore beside it.

Why: an engine test that runs on MemoryStore alone cannot tell the engine's behaviour from
MemoryStore's packed records and heap. `ReferenceStore` is the spec of the five operations
(idemtools/stores/reference.py); running the engine's tests on it, and on MemoryStore as the
optimisation that must answer the same, puts each bug where it belongs.

Use from a conftest (e.g. tests/engine/conftest.py)::

    from tests.stores.fixtures import any_store, reference_store, store_clock  # noqa: F401

then take `reference_store` (one ReferenceStore on a fake clock), or `any_store` (each test
runs once on the ReferenceStore, once on a MemoryStore), or call `new_store()` where a test
builds its store itself (`MemoryStore()` → `new_store()`).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Literal

import pytest

from idemtools.stores.base import FullStore
from idemtools.stores.memory import MemoryStore
from idemtools.stores.reference import ReferenceStore

from .conformance import FakeClock

__all__ = ["STORE_KINDS", "any_store", "new_store", "reference_store"]

STORE_KINDS = ("reference", "memory")


def new_store(
    kind: Literal["reference", "memory"] = "reference",
    *,
    clock: Callable[[], float] | None = None,
    max_records: int | None = None,
    max_records_per_scope: int | None = None,
) -> FullStore:
    """A fresh in-process store: the reference (default) or MemoryStore with the same bounds.

    MemoryStore's per-scope shares are off unless asked for, so both refuse alike."""
    clock = time.monotonic if clock is None else clock
    if kind == "reference":
        return ReferenceStore(
            max_records=max_records, max_records_per_scope=max_records_per_scope, clock=clock
        )
    return MemoryStore(
        max_records=max_records or 100_000,
        max_records_per_scope=max_records_per_scope,
        max_bytes_per_scope=None,
        clock=clock,
    )


@pytest.fixture
def store_clock() -> FakeClock:
    """The fake clock the fixture stores run on (`advance(seconds)` moves it)."""
    return FakeClock()


@pytest.fixture
async def reference_store(store_clock: FakeClock) -> AsyncIterator[FullStore]:
    store = new_store("reference", clock=store_clock)
    yield store
    await store.aclose()


@pytest.fixture(params=STORE_KINDS)
async def any_store(
    request: pytest.FixtureRequest, store_clock: FakeClock
) -> AsyncIterator[FullStore]:
    store = new_store(request.param, clock=store_clock)
    yield store
    await store.aclose()
