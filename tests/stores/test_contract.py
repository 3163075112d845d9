"""The store contract beyond the operations: `store_info`, `lease_keeper_store`, the words
each store gives the generated docs, and the helpers the stores share (stores/_common.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from idemtools.errors import QuotaExceededError, RecordCorruptError, StoreFullError
from idemtools.stores import MemoryStore, SQLiteStore
from idemtools.stores._common import (
    at_least_one,
    corrupt,
    once_more_if_broken,
    quota_exceeded,
    store_full,
)
from idemtools.stores.base import (
    UNDOCUMENTED,
    Claim,
    ForgettingStore,
    FullStore,
    PurgingStore,
    Record,
    Store,
    StoreInfo,
    lease_keeper_store,
    store_info,
)
from idemtools.stores.reference import ReferenceStore

from .conformance import FakeClock


class OldStyle:
    """A third-party store written against the five operations alone (no info, no keeper)."""

    kind = "legacy"

    def __init__(self) -> None:
        self.inner = ReferenceStore()

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        return await self.inner.claim(scope, key, fingerprint, owner, lease)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        return await self.inner.renew(scope, key, owner, lease)

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        return await self.inner.complete(
            scope, key, owner, outcome, retention, fingerprint=fingerprint
        )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        return await self.inner.release(scope, key, owner)

    async def get(self, scope: str, key: str) -> Record | None:
        return await self.inner.get(scope, key)

    async def aclose(self) -> None:
        return None


def test_an_old_style_store_is_still_a_store() -> None:
    store = OldStyle()
    assert isinstance(store, Store)
    assert not isinstance(store, FullStore)
    assert not isinstance(store, ForgettingStore)


def test_an_old_style_store_is_described_as_the_docs_always_did() -> None:
    assert store_info(OldStyle()) == StoreInfo(
        kind="legacy",
        label="custom store (legacy)",
        description="legacy",
        restarts="See the store's documentation.",
        instances="See the store's documentation.",
    )
    assert UNDOCUMENTED == "See the store's documentation."


def test_an_old_style_store_gives_its_bounds_and_whereabouts_by_attribute() -> None:
    class Bounded(OldStyle):
        kind = ""  # no kind: its class name, as the docs said
        description = "redis://app:QXZJKVWQ@cache:6379/0"
        max_bytes = 4096
        max_records = "many"  # not an int: not a bound
        max_records_per_scope = 5

    info = store_info(Bounded())
    assert (info.kind, info.label) == ("Bounded", "custom store (Bounded)")
    assert info.description == "Bounded (redis://app:***@cache:6379/0)"
    assert (info.max_bytes, info.max_records, info.max_records_per_scope) == (4096, None, 5)
    assert info.bound is None


def test_a_store_without_for_lease_keeper_is_renewed_on_the_servers_loop() -> None:
    # Its operations may be bound to the server's loop: None sends renewals there.
    assert lease_keeper_store(OldStyle()) is None


def test_for_lease_keeper_is_asked_when_present() -> None:
    class NoClone(OldStyle):
        def for_lease_keeper(self) -> Store | None:
            return None

    class Broken(OldStyle):
        def for_lease_keeper(self) -> Store | None:
            raise RuntimeError("no connection")

    assert lease_keeper_store(NoClone()) is None
    with pytest.raises(RuntimeError, match="no connection"):
        lease_keeper_store(Broken())  # the keeper logs it and renews on the server's loop
    memory = MemoryStore()
    assert lease_keeper_store(memory) is memory


def test_a_subclass_describes_itself_under_its_own_kind_redacted() -> None:
    # What engine.store_calls.store_name logs for such a store: its kind, its URL, password hidden.
    class UrlStore(MemoryStore):
        kind = "custom"
        description = "redis://app:QXZJKVWQ@cache:6379/0"

    info = store_info(UrlStore())
    assert info.kind == "custom"
    assert info.description == "custom (redis://app:***@cache:6379/0)"


def test_the_docs_words_of_each_store(tmp_path: Path) -> None:
    """The words the generated docs have used per store kind (docs.py `_STORES`, `_bound`),
    now given by each store: changing one changes every server's published page."""
    memory = store_info(MemoryStore())
    assert (memory.kind, memory.label, memory.bound) == ("memory", "in-process memory", None)
    assert memory.restarts == (
        "Records are lost when the server restarts: a retry that reaches the restarted server "
        "runs the tool again."
    )
    assert memory.instances == (
        "Per process: each instance or worker has its own records, so a retry that reaches "
        "another instance runs the tool again. Run one instance, or use a shared store."
    )
    assert (memory.max_records, memory.max_bytes, memory.max_records_per_scope) == (
        100_000,
        256 << 20,
        10_000,
    )
    sqlite = store_info(SQLiteStore(f"{tmp_path}/x.db", max_records_per_scope=4))
    assert (sqlite.label, sqlite.bound) == ("SQLite database file", None)
    assert sqlite.restarts == "Records survive restarts (they are in the database file)."
    assert sqlite.instances == (
        "Shared by the processes on one host that open the same file; not shared across hosts."
    )
    assert (sqlite.max_records, sqlite.max_bytes, sqlite.max_records_per_scope) == (
        None,
        1 << 30,
        4,
    )
    assert sqlite.description == f"sqlite ({tmp_path}/x.db)"


def test_the_docs_words_of_the_server_stores() -> None:
    pytest.importorskip("redis")
    pytest.importorskip("psycopg")
    from idemtools.stores.postgres import PostgresStore
    from idemtools.stores.redis import RedisStore

    redis = store_info(RedisStore.from_url("redis://127.0.0.1:6379/0"))
    assert (redis.label, redis.bound) == (
        "Redis",
        "Redis `maxmemory` (with `maxmemory-policy noeviction`)",
    )
    assert redis.restarts == (
        "Records survive server restarts; they survive a Redis restart only as far as Redis "
        "persistence is configured."
    )
    assert redis.instances == "Shared by every instance that uses the same Redis."
    assert redis.description == "redis (redis://127.0.0.1:6379/0 prefix='idemtools:')"
    postgres = store_info(PostgresStore.from_url("postgresql://u:secret@db/app", max_bytes=1 << 20))
    assert (postgres.label, postgres.bound) == ("PostgreSQL", "the database's disk")
    assert postgres.restarts == "Records survive restarts (they are in the database)."
    assert postgres.instances == "Shared by every instance that uses the same database."
    assert (postgres.max_bytes, postgres.max_records, postgres.max_records_per_scope) == (
        1 << 20,
        None,
        None,
    )
    assert "secret" not in postgres.description


def test_optional_members_are_protocols_of_their_own(tmp_path: Path) -> None:
    sqlite = SQLiteStore(f"{tmp_path}/x.db")
    assert isinstance(sqlite, ForgettingStore) and isinstance(sqlite, PurgingStore)
    assert not isinstance(MemoryStore(), ForgettingStore)
    assert not isinstance(MemoryStore(), PurgingStore)


async def test_sqlite_purge_expired_takes_a_limit(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SQLiteStore(f"{tmp_path}/x.db", clock=clock, cleanup_batch=4)
    try:
        for i in range(10):
            assert (await store.claim("s", f"k{i}", "f", f"o{i}", 1.0)).claimed
        clock.advance(2.0)
        assert await store.purge_expired(limit=3) == 3
        assert await store.purge_expired(limit=5) == 5
        assert await store.purge_expired() == 2
        assert await store.purge_expired() == 0
    finally:
        await store.aclose()


# -- the shared helpers -------------------------------------------------------------------------


def test_bound_checks_say_what_none_means() -> None:
    at_least_one("max_records", 1)
    at_least_one("max_records", None, none="unbounded")
    with pytest.raises(ValueError, match=r"^max_records must be at least 1$"):
        at_least_one("max_records", 0)
    with pytest.raises(ValueError, match=r"^max_records must be at least 1$"):
        at_least_one("max_records", None)
    with pytest.raises(
        ValueError, match=r"^max_records_per_scope must be at least 1 \(or None for no quota\)$"
    ):
        at_least_one("max_records_per_scope", 0, none="no quota")


def test_refusals_keep_their_words() -> None:
    quota = quota_exceeded(3, "k")
    assert isinstance(quota, QuotaExceededError)
    assert str(quota).startswith(
        "this caller holds its maximum of 3 live idempotency records; the call was not run"
    )
    full = store_full("SQLite", 9, "live records", "k")
    assert isinstance(full, StoreFullError)
    assert str(full).startswith("SQLite store holds its maximum of 9 live records")
    bad = corrupt("Redis", "k", "unknown status")
    assert isinstance(bad, RecordCorruptError)
    assert str(bad).startswith(
        "the idempotency record for this key in Redis cannot be read (unknown status); the "
        "call was not run"
    )


class Broken(ConnectionError):
    pass


async def test_once_more_if_broken_retries_once_and_only_a_broken_connection() -> None:
    calls: list[bool] = []
    reset: list[str] = []

    async def flaky(retrying: bool) -> str:
        calls.append(retrying)
        if not retrying:
            raise Broken("reset by peer")
        return "ok"

    async def before() -> None:
        reset.append("checked")

    def broken(exc: Exception) -> bool:
        return isinstance(exc, Broken)

    assert await once_more_if_broken(flaky, broken, before_retry=before) == "ok"
    assert (calls, reset) == ([False, True], ["checked"])

    async def always(retrying: bool) -> str:
        calls.append(retrying)
        raise Broken(f"down (retrying={retrying})")

    calls.clear()
    with pytest.raises(Broken, match="retrying=True") as info:
        await once_more_if_broken(always, broken)
    assert calls == [False, True]  # once more, never twice
    assert isinstance(info.value.__context__, Broken)  # the first failure, for the traceback

    async def refused(retrying: bool) -> str:
        calls.append(retrying)
        raise ValueError("not a connection problem")

    calls.clear()
    with pytest.raises(ValueError):
        await once_more_if_broken(refused, broken)
    assert calls == [False]
