"""idemtools.stores.from_url: one URL configures a store, idemtools' settings in its query."""

from __future__ import annotations

from pathlib import Path

import pytest

from idemtools.stores import MemoryStore, SQLiteStore, from_url


def test_memory_with_max_records() -> None:
    store = from_url("memory://?max_records=5")
    assert isinstance(store, MemoryStore) and store.max_records == 5


async def test_sqlite_absolute_path_and_options(tmp_path: Path) -> None:
    db = tmp_path / "idem.db"
    store = from_url(f"sqlite://{db}?max_records=7")
    assert isinstance(store, SQLiteStore)
    claim = await store.claim("s", "k", "f", "o", 5.0)
    assert claim.claimed and db.exists()
    await store.aclose()


def test_redis_prefix_from_query() -> None:
    pytest.importorskip("redis")
    store = from_url("redis://127.0.0.1:6379/0?prefix=run1:")
    assert store.prefix == "run1:"  # type: ignore[attr-defined]


def test_redis_allow_eviction_from_query() -> None:
    pytest.importorskip("redis")
    assert not from_url("redis://127.0.0.1:6379/0").allow_eviction  # type: ignore[attr-defined]
    store = from_url("redis://127.0.0.1:6379/0?allow_eviction=true&prefix=p:")
    assert store.allow_eviction and store.prefix == "p:"  # type: ignore[attr-defined]
    kwargs = store.client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    assert "allow_eviction" not in kwargs  # ours, not the driver's
    with pytest.raises(ValueError, match="allow_eviction"):
        from_url("redis://127.0.0.1:6379/0?allow_eviction=maybe")


def test_postgres_table_from_query() -> None:
    pytest.importorskip("psycopg")
    store = from_url("postgresql://postgres@127.0.0.1:5432/test?table=run1")
    assert store.table == "run1"  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["nothing", "ftp://x", "sqlite://"])
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        from_url(url)
