"""MemoryStore against the shared store conformance suite."""

from __future__ import annotations

from idemtools.stores.base import Store
from idemtools.stores.memory import MemoryStore

from .conformance import FakeClock, StoreConformance


class TestMemoryStore(StoreConformance):
    async def make_store(self, clock: FakeClock, *, max_records: int | None = None) -> Store:
        if max_records is None:
            return MemoryStore(clock=clock)
        return MemoryStore(clock=clock, max_records=max_records)
