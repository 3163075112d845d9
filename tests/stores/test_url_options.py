"""Store URL options: idemtools' own options in the query apply (seen in the store's real
records), an option neither idemtools nor the driver takes is refused at construction naming it
(on every `from_url`), a driver option still reaches the driver, and values are typed with
errors that name the option."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemtools.errors import StoreFullError
from idemtools.stores import InvalidStoreURLError, MemoryStore, SQLiteStore, from_url
from idemtools.stores._url_options import OPTIONS, duration, take
from tests.services import RUN_ID, need_postgres, need_redis


def _unknown_urls(tmp: Path) -> list[str]:
    return [
        "memory://?bogus_option=1",
        f"sqlite://{tmp}/u.db?bogus_option=1",
        "redis://127.0.0.1:6379/0?bogus_option=1",
        "rediss://127.0.0.1:6379/0?bogus_option=1",
        "unix:///tmp/redis.sock?bogus_option=1",
        "redis+cluster://127.0.0.1:7000?bogus_option=1",
        "postgresql://postgres@127.0.0.1/test?bogus_option=1",
    ]


@pytest.mark.parametrize("index", range(7))
def test_an_unknown_option_is_refused_at_construction_naming_it(tmp_path: Path, index: int) -> None:
    if index >= 2:
        pytest.importorskip("redis" if index < 6 else "psycopg")
    url = _unknown_urls(tmp_path)[index]
    with pytest.raises(InvalidStoreURLError, match=r"bogus_option= is unknown") as refused:
        from_url(url + "&prefix=app:" if "redis" in url else url)
    assert "127.0.0.1" not in str(refused.value)  # the option, never the URL


@pytest.mark.parametrize("kind", ["redis", "postgres"])
def test_the_stores_own_from_url_refuses_it_too(kind: str) -> None:
    if kind == "redis":
        pytest.importorskip("redis")
        from idemtools.stores.redis import RedisStore

        with pytest.raises(InvalidStoreURLError, match="typo_opt= is unknown: neither RedisStore"):
            RedisStore.from_url("redis://127.0.0.1:6379/0?prefix=a:&typo_opt=1")
    else:
        pytest.importorskip("psycopg")
        from idemtools.stores.postgres import PostgresStore

        with pytest.raises(InvalidStoreURLError, match="typo_opt= is unknown: neither Postgres"):
            PostgresStore.from_url("postgresql://postgres@127.0.0.1/test?typo_opt=1")


async def test_redis_prefix_from_the_url_is_the_prefix_of_the_real_keys() -> None:
    """The original complaint: `RedisStore.from_url("redis://…?prefix=app:")` handed `prefix`
    to redis-py, and every call failed as `idempotency_store_unavailable`."""
    pytest.importorskip("redis")
    from idemtools.stores.redis import RedisStore

    url = need_redis()
    sep = "&" if "?" in url else "?"
    for build in (RedisStore.from_url, from_url):
        prefix = f"idemtools-test-{RUN_ID}-{uuid.uuid4().hex[:6]}:"
        store = build(f"{url}{sep}prefix={prefix}&socket_timeout=4&timeout=3s")
        assert isinstance(store, RedisStore)
        try:
            claim = await store.claim("scope", "key", "fp", "owner", 5.0)
            assert claim.claimed
            client: Any = store._client
            keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
            assert keys, "no key under the URL's prefix"
            # A driver option passes through: redis-py's own socket_timeout.
            assert client.connection_pool.connection_kwargs["socket_timeout"] == 4.0
            assert client.connection_pool.timeout == 3.0  # ours, typed: the pool's wait
            await client.delete(*keys)
        finally:
            await store.aclose()


async def test_postgres_options_from_the_url_and_a_libpq_option_passing_through() -> None:
    pytest.importorskip("psycopg")
    from idemtools.stores.postgres import PostgresStore

    url = need_postgres()
    table = f"idem_url_{RUN_ID}"
    sep = "&" if "?" in url else "?"
    store = PostgresStore.from_url(
        f"{url}{sep}table={table}&application_name=idem-url-{RUN_ID}&connect_timeout=3&timeout=4s"
    )
    try:
        await store.create_schema()
        assert (await store.claim("scope", "key", "fp", "owner", 5.0)).claimed
        async with store._pool.connection() as conn:
            rows = await (await conn.execute(f"SELECT count(*) FROM {table}")).fetchone()
            name = await (await conn.execute("SHOW application_name")).fetchone()
        assert rows is not None and rows[0] == 1  # the record is in the URL's table
        assert name is not None and name[0] == f"idem-url-{RUN_ID}"  # libpq's own option
        kwargs: Any = store._pool.kwargs
        assert kwargs["connect_timeout"] == 3 and store._pool.timeout == 4.0
        async with store._pool.connection() as conn:
            await conn.execute(f"DROP TABLE {table}")
    finally:
        await store.aclose()


async def test_memory_and_sqlite_options_apply(tmp_path: Path) -> None:
    memory = from_url("memory://?max_records=1&max_records_per_scope=none")
    assert (await memory.claim("s", "a", "f", "o", 5.0)).claimed
    with pytest.raises(StoreFullError):
        await memory.claim("s", "b", "f", "o", 5.0)
    sqlite = from_url(f"sqlite://{tmp_path}/o.db?busy_timeout=250ms&cleanup_batch=7")
    assert isinstance(sqlite, SQLiteStore) and (sqlite.busy_timeout, sqlite.cleanup_batch) == (
        0.25,
        7,
    )
    assert str(sqlite.path) == f"{tmp_path}/o.db"  # the query is not part of the path
    await sqlite.aclose()


def test_a_keyword_wins_over_the_query() -> None:
    pytest.importorskip("redis")
    from idemtools.stores.redis import RedisStore

    store = RedisStore.from_url("redis://127.0.0.1:6379/0?prefix=url:", prefix="kw:")
    assert store.prefix == "kw:"
    assert from_url("redis://127.0.0.1:6379/0?prefix=url:", prefix="kw:").prefix == "kw:"  # type: ignore[attr-defined]
    memory = from_url("memory://?max_records=9", max_records=3)
    assert isinstance(memory, MemoryStore) and memory.max_records == 3


_TYPED = [
    (kind, name)
    for kind, names in OPTIONS.items()
    for name in names
    if name not in ("prefix", "table")
]
_SCHEME = {
    "memory": "memory://",
    "sqlite": "sqlite:///x.db",
    "redis": "redis://127.0.0.1:6379/0",
    "postgres": "postgresql://postgres@127.0.0.1/test",
}


@given(st.sampled_from(_TYPED), st.sampled_from(["abc", "1.5.2", "ten", "--", "1e", "5 parsecs"]))
def test_a_value_of_the_wrong_type_is_refused_naming_the_option(
    option: tuple[str, str], value: str
) -> None:
    kind, name = option
    if kind in ("redis", "postgres"):
        pytest.importorskip("redis" if kind == "redis" else "psycopg")
    with pytest.raises(InvalidStoreURLError, match=f"option {name}= "):
        from_url(f"{_SCHEME[kind]}?{name}={value}")


@given(
    st.integers(0, 10**6),
    st.sampled_from([("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("", 1)]),
)
def test_durations(n: int, unit: tuple[str, float]) -> None:
    assert duration("t", f"{n}{unit[0]}") == pytest.approx(n * unit[1])


_HEADS = [
    "unix:///tmp/redis.sock",
    "redis:///0",
    "redis://127.0.0.1:6379/0",
    "rediss://user:pw@host:6380/2",
    "redis+cluster://127.0.0.1:7000",
    "postgresql://postgres@127.0.0.1/test",
    "postgresql:///test",
]


@given(
    head=st.sampled_from(_HEADS),
    theirs=st.lists(st.sampled_from(["db=1", "socket_timeout=2", "sslmode=require"]), max_size=2),
    fragment=st.sampled_from(["", "#part"]),
)
def test_taking_the_options_keeps_the_url_as_written(
    head: str, theirs: list[str], fragment: str
) -> None:
    # Rebuilt from its parts, `unix:///path` came back as `unix:/path` (its empty host lost),
    # which redis-py 8.2 refuses: only the query may change.
    kind = "postgres" if head.startswith("postgresql") else "redis"
    own = "table=t" if kind == "postgres" else "prefix=app:"
    rest, found = take(f"{head}?{'&'.join([own, *theirs])}{fragment}", kind)
    assert found
    assert rest == head + ("?" + "&".join(theirs) if theirs else "") + fragment


def test_a_unix_socket_url_with_options_reaches_redis_py_as_written() -> None:
    pytest.importorskip("redis")
    store = from_url("unix:///tmp/idemtools-no-such.sock?prefix=app:&socket_timeout=2")
    kwargs = store._client.connection_pool.connection_kwargs  # type: ignore[attr-defined]
    assert kwargs["path"] == "/tmp/idemtools-no-such.sock" and kwargs["socket_timeout"] == 2
