"""SQLiteStore: the shared conformance suite, then what only a file-backed store must do."""

from __future__ import annotations

from idemtools.stores.base import Store
from idemtools.stores.sqlite import SQLiteStore

from .conformance import FakeClock, StoreConformance


class TestSQLiteConformance(StoreConformance):
    async def make_store(self, clock: FakeClock, *, max_records: int | None = None) -> Store:
        return SQLiteStore(self.tmp_path / "idem.db", clock=clock, max_records=max_records)
