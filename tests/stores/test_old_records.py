"""Claims without lapsed bookkeeping are free keys once their lease ran out.

Each store here is given a claim in the record format without a lease end or a keep (its
statements and fields as a writer of that format uses them), then read and claimed:
in progress while its lease lasts, then a free key (never LAPSED, never taken over), however
long a keep the new claim asks for. SQLite and PostgreSQL tables without the lapsed columns
are upgraded in place (SQLite when a connection opens the file, PostgreSQL by `create_schema`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import psycopg
import pytest
from psycopg import sql

from idemtools.errors import StoreUnavailableError
from idemtools.stores.base import Claim, LapsingStore, Status
from idemtools.stores.postgres import PostgresStore
from idemtools.stores.redis import RedisStore
from idemtools.stores.sqlite import SQLiteStore

from ..services import RUN_ID, delete_redis_keys, drop_postgres_tables, need_postgres, need_redis
from .conformance import FakeClock

SCOPE, KEY, FP, OWNER = "scope", "k\x00\ud800", "fp", "old-owner"
KEEP = 600.0
TABLE_PREFIX = f"idemtools_o_{RUN_ID}_"
REDIS_PREFIX = f"idemtools-old-{RUN_ID}:"


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    with contextlib.suppress(Exception):
        drop_postgres_tables(TABLE_PREFIX)
    with contextlib.suppress(Exception):
        delete_redis_keys(REDIS_PREFIX)


async def _read_as_free_key(store: LapsingStore, advance: object, lease: float) -> None:
    """In progress while the claim's lease lasts, then a free key for a claim with a keep."""
    record = await store.get(SCOPE, KEY)
    assert record is not None
    assert (record.status, record.owner, record.fingerprint) == (Status.IN_PROGRESS, OWNER, FP)
    assert record.lapsed_at is None
    refused = await store.claim(SCOPE, KEY, FP, "new-owner", lease, keep_lapsed=KEEP)
    assert not refused.claimed and refused.existing is not None
    assert refused.existing.owner == OWNER
    await advance(lease * 1.5)  # type: ignore[operator]
    assert await store.get(SCOPE, KEY) is None  # not LAPSED: a free key
    claim = await store.claim(SCOPE, KEY, FP, "new-owner", lease, keep_lapsed=KEEP)
    assert claim == Claim(claimed=True)  # nothing taken over
    record = await store.get(SCOPE, KEY)
    assert record is not None and (record.status, record.owner) == (
        Status.IN_PROGRESS,
        "new-owner",
    )


# -- SQLite ------------------------------------------------------------------------------------

_OLD_SQLITE_TABLE = """
    CREATE TABLE IF NOT EXISTS idemtools_records (
        scope       BLOB NOT NULL,
        key         BLOB NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('in_progress', 'completed')),
        fingerprint TEXT NOT NULL,
        owner       TEXT NOT NULL,
        expires     REAL NOT NULL,
        outcome     BLOB,
        PRIMARY KEY (scope, key)
    )
"""
_OLD_SQLITE_CLAIM = (
    "INSERT OR REPLACE INTO idemtools_records "
    "(scope, key, status, fingerprint, owner, expires, outcome) "
    "VALUES (?, ?, 'in_progress', ?, ?, ?, NULL)"
)


def _old_sqlite_claim(path: Path, expires: float) -> None:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute(_OLD_SQLITE_TABLE)
        enc = [s.encode("utf-8", "surrogatepass") for s in (SCOPE, KEY)]
        conn.execute(_OLD_SQLITE_CLAIM, (*enc, FP, OWNER, expires))


@pytest.mark.parametrize("upgraded_first", [False, True])
async def test_sqlite_old_claim_is_a_free_key_after_its_lease(
    tmp_path: Path, upgraded_first: bool
) -> None:
    # A file without the lapsed columns, or (upgraded_first) an upgraded file a writer of the
    # format without them still writes to with its statement.
    path, clock, lease = tmp_path / "idem.db", FakeClock(), 30.0
    if upgraded_first:
        store = SQLiteStore(path, clock=clock)
        await store.get("x", "y")  # opens (and upgrades) the file
        await store.aclose()
    _old_sqlite_claim(path, clock() + lease)

    async def advance(seconds: float) -> None:
        clock.advance(seconds)

    store = SQLiteStore(path, clock=clock)
    try:
        await _read_as_free_key(store, advance, lease)
    finally:
        await store.aclose()


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.services
async def test_redis_old_claim_is_a_free_key_after_its_lease() -> None:
    store = RedisStore.from_url(need_redis(), prefix=f"{REDIS_PREFIX}{uuid.uuid4().hex[:8]}:")
    lease = 0.4
    try:
        name = store.key_name(SCOPE, KEY)
        # A claim without lapsed bookkeeping: HSET s, f, o; PEXPIRE lease.
        await store.client.hset(name, mapping={"s": "p", "f": FP, "o": OWNER})
        await store.client.pexpire(name, round(lease * 1000))
        await _read_as_free_key(store, anyio.sleep, lease)
    finally:
        await store.aclose()


# -- PostgreSQL --------------------------------------------------------------------------------

_OLD_POSTGRES_TABLE = """CREATE TABLE {t} (
    scope       bytea       NOT NULL,
    key         bytea       NOT NULL,
    status      text        NOT NULL CHECK (status IN ('p', 'c')),
    fingerprint text        NOT NULL,
    owner       text        NOT NULL,
    outcome     bytea,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
)"""
_OLD_POSTGRES_CLAIM = """INSERT INTO {t} (scope, key, status, fingerprint, owner, outcome,
    expires_at) VALUES (%s, %s, 'p', %s, %s, NULL,
    statement_timestamp() + make_interval(secs => %s))"""


@pytest.mark.services
async def test_postgres_old_claim_is_a_free_key_after_its_lease() -> None:
    url = need_postgres()
    table = f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}"
    lease = 2.0
    ident = sql.Identifier(table)
    with psycopg.connect(url, autocommit=True) as conn:  # no lapsed columns
        conn.execute(sql.SQL(_OLD_POSTGRES_TABLE).format(t=ident))
        enc = [s.encode("utf-8", "surrogatepass") for s in (SCOPE, KEY)]
        conn.execute(sql.SQL(_OLD_POSTGRES_CLAIM).format(t=ident), (*enc, FP, OWNER, lease))
    store = PostgresStore.from_url(url, table=table, timeout=2)
    try:
        # Not yet upgraded: refused with what to do, never read as a free key.
        with pytest.raises(StoreUnavailableError, match="create_schema"):
            await store.claim(SCOPE, KEY, FP, "new-owner", lease)
        await store.create_schema()  # the upgrade: adds the columns, keeps the rows
        await _read_as_free_key(store, anyio.sleep, lease)
    finally:
        await store.aclose()
