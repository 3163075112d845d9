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


def test_memory_bounds_from_query() -> None:
    store = from_url("memory://?max_bytes=1048576&max_records_per_scope=50")
    assert isinstance(store, MemoryStore)
    assert (store.max_bytes, store.max_records_per_scope, store.max_records) == (
        1 << 20,
        50,
        100_000,
    )
    default = from_url("memory://")
    assert isinstance(default, MemoryStore)
    # One caller cannot fill a default store: a tenth of it per scope.
    assert (default.max_bytes, default.max_records_per_scope) == (256 << 20, 10_000)
    assert default.max_bytes_per_scope == (256 << 20) // 10
    off = from_url("memory://?max_records_per_scope=none&max_bytes_per_scope=None")
    assert isinstance(off, MemoryStore)
    assert (off.max_records_per_scope, off.max_bytes_per_scope) == (None, None)
    share = from_url("memory://?max_bytes_per_scope=1000")
    assert isinstance(share, MemoryStore) and share.max_bytes_per_scope == 1000


async def test_sqlite_bounds_from_query(tmp_path: Path) -> None:
    store = from_url(f"sqlite://{tmp_path / 'idem.db'}?max_bytes=2_000_000&max_records_per_scope=9")
    assert isinstance(store, SQLiteStore)
    assert (store.max_bytes, store.max_records_per_scope) == (2_000_000, 9)
    assert from_url(f"sqlite://{tmp_path / 'x.db'}").max_bytes == 1 << 30  # type: ignore[attr-defined]
    # A keyword wins over the query, as for every option.
    assert (
        from_url("memory://?max_records_per_scope=9", max_records_per_scope=3).max_records_per_scope  # type: ignore[attr-defined]
        == 3
    )


def test_quota_from_query_on_shared_stores() -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    redis_store = from_url("redis://127.0.0.1:6379/0?prefix=p:&max_records_per_scope=7")
    assert redis_store.max_records_per_scope == 7  # type: ignore[attr-defined]
    assert redis_store.policy_recheck == 5.0  # type: ignore[attr-defined]
    rechecked = from_url("redis://127.0.0.1:6379/0?policy_recheck=0.5")
    assert rechecked.policy_recheck == 0.5  # type: ignore[attr-defined]
    pg = from_url("postgresql://postgres@127.0.0.1:5432/test?table=t&max_records_per_scope=8")
    assert pg.max_records_per_scope == 8  # type: ignore[attr-defined]
    assert pg.table == "t"  # type: ignore[attr-defined]
    assert pg.max_bytes is None  # type: ignore[attr-defined]
    budget = from_url("postgresql://postgres@127.0.0.1:5432/test?max_bytes=1_000_000")
    assert budget.max_bytes == 1_000_000  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "url",
    ["memory://?max_bytes=lots", "memory://?max_records_per_scope=0", "memory://?max_bytes=0"],
)
def test_bad_bounds_in_query_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        from_url(url)


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
