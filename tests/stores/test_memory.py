"""MemoryStore against the shared store conformance suite."""

from __future__ import annotations

from idemtools.stores.base import Store
from idemtools.stores.memory import MemoryStore

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
        return MemoryStore(clock=clock, max_records_per_scope=max_records_per_scope, **bounds)


async def test_flood_one_scope_others_unaffected() -> None:
    await flood_scenario(MemoryStore(max_records_per_scope=5), 5)
