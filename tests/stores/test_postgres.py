"""PostgresStore against a real PostgreSQL: conformance, races, crashes, outages, transactions.

Needs the server at IDEMTOOLS_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test);
skipped without it, failed without it under IDEMTOOLS_REQUIRE_SERVICES=1. Every table this
module creates carries a per-run name and is dropped at the end.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import psycopg
import pytest
from psycopg import sql

from idemtools.engine import Engine
from idemtools.errors import StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.stores.base import LapsingStore, Status
from idemtools.stores.postgres import PostgresStore, current_connection

from ..services import (
    RUN_ID,
    crash_worker,
    drop_postgres_tables,
    need_postgres,
    postgres_url,
    proxy_to,
    scope_hash,
    with_port,
)
from .conformance import FakeClock, StoreConformance
from .flood import flood_scenario
from .test_redis import OK, Counter, _call, _check_race_records, _race, _type, crash_scenario

pytestmark = pytest.mark.services

TABLE_PREFIX = f"idemtools_t_{RUN_ID}_"


def _table() -> str:
    return f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_tables(TABLE_PREFIX)


async def _new_store(table: str | None = None, **kwargs: Any) -> PostgresStore:
    store = PostgresStore.from_url(need_postgres(), table=table or _table(), **kwargs)
    await store.create_schema()
    return store


@pytest.fixture
async def store() -> AsyncIterator[PostgresStore]:
    s = await _new_store()
    yield s
    await s.aclose()


class TestPostgresConformance(StoreConformance):
    # Real time on the database's clock: a lease of 0.4 s lapsed between two statements once
    # under a loaded CI machine, so these are long enough to outlast a stall of a second.
    LEASE = 1.2
    RETENTION = 2.4
    TOLERANCE = 0.3

    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        if max_records is not None:
            pytest.skip(
                "PostgresStore is bounded by the database's disk (claims refused with "
                "StoreFullError on disk full) and by max_bytes, not by a record count"
            )
        return await _new_store(max_records_per_scope=max_records_per_scope, max_bytes=max_bytes)

    async def advance(self, seconds: float) -> None:
        await anyio.sleep(seconds)


# -- schema, statements, cleanup ------------------------------------------------------------------


async def test_schema_is_explicit_and_idempotent() -> None:
    url = need_postgres()
    store = PostgresStore.from_url(url, table=_table(), timeout=2)
    with pytest.raises(StoreUnavailableError, match="create_schema"):
        await store.claim("s", "k", "fp", "o", 5)  # constructing it created nothing
    await store.create_schema()
    await store.create_schema()
    assert "PRIMARY KEY (scope, key)" in PostgresStore.schema_sql("app.records")
    assert '"app"."records"' in PostgresStore.schema_sql("app.records")
    assert (await store.claim("s", "k", "fp", "o", 5)).claimed
    await store.aclose()


async def test_keys_are_bytes_so_nul_and_surrogates_work(store: PostgresStore) -> None:
    for key in ["a\x00b", "x\ud800", "é"]:
        assert (await store.claim("s", key, "fp", "o", 5)).claimed
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT key FROM {} ORDER BY key").format(sql.Identifier(store.table))
        )
        keys = [bytes(r[0]) for r in await cur.fetchall()]
    assert b"a\x00b" in keys and "x\ud800".encode("utf-8", "surrogatepass") in keys


async def test_purge_expired_is_bounded_and_opportunistic() -> None:
    store = await _new_store(purge_every=0)
    for i in range(30):
        await store.claim("s", f"k{i}", "fp", "o", 0.1)
    await store.claim("s", "live", "fp", "o", 60)
    await anyio.sleep(0.2)
    assert await store.purge_expired(limit=10) == 10
    assert await store.purge_expired(limit=100) == 20
    assert await store.purge_expired(limit=100) == 0
    assert (await store.get("s", "live")) is not None
    await store.aclose()
    # Opportunistic: every 5th claim purges at most 3 expired rows.
    store = await _new_store(table=store.table, purge_every=5, purge_limit=3)
    for i in range(4):
        await store.claim("s", f"e{i}", "fp", "o", 0.1)
    await anyio.sleep(0.2)
    await store.claim("s", "fifth", "fp", "o", 60)  # 5th claim of this store instance
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(store.table))
        )
        row = await cur.fetchone()
    assert row is not None and row[0] == 1 + 1 + 1  # live, fifth, one expired row left
    await store.aclose()


async def test_time_comes_from_the_database_clock(store: PostgresStore) -> None:
    await store.claim("s", "k", "fp", "o", 30)
    async with store.pool.connection() as conn:
        cur = await conn.execute(
            sql.SQL("SELECT extract(epoch FROM expires_at - now()) FROM {}").format(
                sql.Identifier(store.table)
            )
        )
        row = await cur.fetchone()
    assert row is not None and 29 < float(row[0]) <= 30.5


async def test_lease_expires_in_real_time_and_stale_owner_is_fenced(store: PostgresStore) -> None:
    assert (await store.claim("s", "k", "fp", "old", 0.3)).claimed
    await anyio.sleep(0.2)
    assert await store.renew("s", "k", "old", 0.3)
    await anyio.sleep(0.2)
    held = await store.claim("s", "k", "fp", "new", 0.3)
    assert not held.claimed and held.existing is not None and held.existing.owner == "old"
    await anyio.sleep(0.35)
    assert (await store.claim("s", "k", "fp", "new", 0.3)).claimed
    assert not await store.complete("s", "k", "old", b"{}", 60)
    assert await store.complete("s", "k", "new", b"{}", 60)


# -- outage and recovery --------------------------------------------------------------------------


async def test_dead_port_fails_closed_quickly() -> None:
    need_postgres()
    dead = PostgresStore.from_url(with_port(postgres_url(), "127.0.0.1", 1), timeout=0.5)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        await dead.claim("s", "k", "fp", "o", 5)
    assert time.monotonic() - started < 2.0
    run = Counter()
    outcome = await Engine(dead).handle(_call("dead-1"), run)
    assert _type(outcome) == "idempotency_store_unavailable" and run.calls == 0
    await dead.aclose()


async def test_outage_mid_run_then_recovery_without_restart() -> None:
    url = need_postgres()
    table = _table()
    async with proxy_to(url, 5432) as proxy:
        store = PostgresStore.from_url(
            with_port(url, "127.0.0.1", proxy.port), table=table, timeout=1.0
        )
        await store.create_schema()
        engine, run = Engine(store), Counter()
        assert await engine.handle(_call("before"), run) == OK
        await proxy.stop()  # PostgreSQL "goes away" mid-run
        started = time.monotonic()
        outcome = await engine.handle(_call("during"), run)
        assert _type(outcome) == "idempotency_store_unavailable"
        assert time.monotonic() - started < 3.0
        assert run.calls == 1
        await proxy.start()
        deadline = time.monotonic() + 15
        while True:  # the pool reconnects in the background, with backoff
            outcome = await engine.handle(_call("during"), run)
            if outcome == OK:
                break
            assert _type(outcome) == "idempotency_store_unavailable"
            assert time.monotonic() < deadline, "the store did not recover"
            await anyio.sleep(0.2)
        assert run.calls == 2
        assert await engine.handle(_call("before"), run) == OK and run.calls == 2
        await store.aclose()


async def test_terminated_backends_recover_on_next_operation() -> None:
    store = await _new_store(min_size=3, max_size=3)
    assert (await store.claim("s", "k", "fp", "o1", 5)).claimed
    pool = store.pool
    async with pool.connection() as a, pool.connection() as b, pool.connection() as c:
        pids = [conn.info.backend_pid for conn in (a, b, c)]
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        for pid in pids:  # what a server restart or a failover does to every pooled connection
            row = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
            assert row == (True,)
    await anyio.sleep(0.1)
    assert await store.complete("s", "k", "o1", b'{"v":1}', 60)  # no error surfaces
    record = await store.get("s", "k")
    assert record is not None and record.status is Status.COMPLETED
    await store.aclose()


async def test_records_survive_a_store_restart() -> None:
    first = await _new_store()
    run = Counter()
    assert await Engine(first).handle(_call("restart-1"), run) == OK
    await first.aclose()
    second = PostgresStore.from_url(need_postgres(), table=first.table)
    replay = await Engine(second).handle(_call("restart-1"), run)
    assert replay == OK and replay.replayed and run.calls == 1
    await second.aclose()


# -- size and bad data ----------------------------------------------------------------------------


async def test_outcome_over_the_limit_is_not_run_twice(store: PostgresStore) -> None:
    big = Outcome(result={"content": [{"type": "text", "text": "x" * 5000}], "isError": False})
    engine = Engine(store, max_outcome_bytes=1000)
    run = Counter(big)
    assert await engine.handle(_call("big"), run) == big
    retry = await engine.handle(_call("big"), run)
    assert _type(retry) == "idempotency_outcome_too_large" and run.calls == 1


@pytest.mark.parametrize("damage", ["garbage-outcome", "null-outcome"])
async def test_corrupt_record_is_a_clear_error_never_a_second_run(
    store: PostgresStore, damage: str
) -> None:
    engine, run = Engine(store), Counter()
    assert await engine.handle(_call("bad"), run) == OK
    value = b"\x00\xff not json" if damage == "garbage-outcome" else None
    async with store.pool.connection() as conn:
        await conn.execute(
            sql.SQL("UPDATE {} SET outcome = %s").format(sql.Identifier(store.table)), (value,)
        )
    retry = await engine.handle(_call("bad"), run)
    assert _type(retry) == "idempotency_record_corrupt"
    assert run.calls == 1


# -- transactional mode ---------------------------------------------------------------------------


async def _payments(store: PostgresStore, *, deferred: bool = False) -> str:
    name = f"{store.table}_payments"
    constraint = " DEFERRABLE INITIALLY DEFERRED" if deferred else ""
    async with store.pool.connection() as conn:
        await conn.execute(
            sql.SQL("CREATE TABLE {} (key text PRIMARY KEY{}, amount int NOT NULL)").format(
                sql.Identifier(name), sql.SQL(constraint)
            )
        )
    return name


async def _count(store: PostgresStore, table: str) -> int:
    async with store.pool.connection() as conn:
        cur = await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_transactional_tool_commits_with_its_record(store: PostgresStore) -> None:
    payments = await _payments(store)
    engine = Engine(store)
    seen_inside: list[int] = []

    async def run() -> Outcome:
        conn = current_connection()
        await conn.execute(
            sql.SQL("INSERT INTO {} VALUES ('tx-1', 100)").format(sql.Identifier(payments))
        )
        seen_inside.append(await _count(store, payments))  # another connection: not yet
        return OK

    assert await engine.handle(_call("tx-1", transactional=True), run) == OK
    assert seen_inside == [0]
    assert await _count(store, payments) == 1
    record = await store.get(scope_hash(), "tx-1")
    assert record is not None and record.status is Status.COMPLETED
    replay = await engine.handle(_call("tx-1", transactional=True), run)
    assert replay == OK and replay.replayed and await _count(store, payments) == 1
    with pytest.raises(LookupError):
        current_connection()


async def test_failed_commit_keeps_nothing_and_frees_the_key(store: PostgresStore) -> None:
    payments = await _payments(store, deferred=True)
    engine = Engine(store)

    async def run() -> Outcome:
        # Violates the deferred primary key only at COMMIT time.
        await current_connection().execute(
            sql.SQL("INSERT INTO {} VALUES ('dup', 1), ('dup', 2)").format(sql.Identifier(payments))
        )
        return OK

    outcome = await engine.handle(_call("tx-fail", transactional=True), run)
    assert _type(outcome) == "idempotency_store_unavailable"
    assert await _count(store, payments) == 0
    assert await store.get(scope_hash(), "tx-fail") is None  # released: a retry may run

    async def good() -> Outcome:
        await current_connection().execute(
            sql.SQL("INSERT INTO {} VALUES ('ok', 1)").format(sql.Identifier(payments))
        )
        return OK

    assert await engine.handle(_call("tx-fail", transactional=True), good) == OK
    assert await _count(store, payments) == 1


async def test_non_transactional_tool_has_no_connection(store: PostgresStore) -> None:
    async def run() -> Outcome:
        with pytest.raises(LookupError):
            current_connection()
        return OK

    assert await Engine(store).handle(_call("plain"), run) == OK


@pytest.mark.slow
async def test_sigkill_between_side_effect_and_commit_rolls_both_back() -> None:
    url = need_postgres()
    store = await _new_store()
    payments = await _payments(store)
    lease = 1.0
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(
        target=crash_worker, args=("postgres", url, store.table, "pay-1", lease, payments, ready)
    )
    proc.start()
    try:
        assert await anyio.to_thread.run_sync(ready.wait, 30), "the worker never started"
        # The payment row is written, inside the open transaction: invisible to others.
        assert await _count(store, payments) == 0
        record = await store.get(scope_hash(), "pay-1")
        assert record is not None and record.status is Status.IN_PROGRESS
        os.kill(proc.pid or 0, signal.SIGKILL)
        proc.join(10)
        killed_at = time.monotonic()
        await anyio.sleep(0.2)
        assert await _count(store, payments) == 0  # rolled back with the process
        record = await store.get(scope_hash(), "pay-1")
        assert record is None or record.status is Status.IN_PROGRESS  # never completed
        engine = Engine(store)
        runs: list[str] = []

        async def run() -> Outcome:
            runs.append("ran")
            await current_connection().execute(
                sql.SQL("INSERT INTO {} VALUES ('pay-1', 100)").format(sql.Identifier(payments))
            )
            return OK

        while True:
            outcome = await engine.handle(_call("pay-1", lease=lease, transactional=True), run)
            if outcome == OK:
                break
            assert _type(outcome) == "idempotency_key_in_progress"
            assert time.monotonic() - killed_at < lease + 2.0, "the key stayed stuck"
            await anyio.sleep(0.05)
        assert runs == ["ran"]
        assert await _count(store, payments) == 1  # exactly one payment in the end
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        await store.aclose()


# -- many processes -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_race_32_processes_one_key_then_500_keys() -> None:
    url = need_postgres()
    store = await _new_store()
    await anyio.to_thread.run_sync(lambda: _race(url, store.table, kind="postgres"))
    await _check_race_records(store)


@pytest.mark.slow
async def test_sigkill_mid_call_key_in_progress_until_lease_then_runs_again() -> None:
    url = need_postgres()
    store = await _new_store()
    await crash_scenario(store, "postgres", url, store.table, lease=1.0)
    await store.aclose()


# -- per-scope quota ------------------------------------------------------------------------------


async def test_flood_one_scope_others_unaffected() -> None:
    store = await _new_store(max_records_per_scope=5)
    try:
        await flood_scenario(store, 5)
    finally:
        await store.aclose()


async def test_quota_store_creates_the_scope_index_and_counts_on_it() -> None:
    table = _table()
    assert "scope_expires_idx" not in PostgresStore.schema_sql(table)
    store = await _new_store(table, max_records_per_scope=3)
    try:
        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            rows = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s", (table,)
            ).fetchall()
            assert any("(scope, expires_at)" in row[0] for row in rows), rows
            # Expired rows of the scope and live rows of another: only the (scope, expires_at)
            # index passes over both (on an empty table the indexes tie, and the planner's
            # pick changed with the table's width).
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (scope, key, status, fingerprint, owner, expires_at) "
                    "SELECT CASE WHEN i % 2 = 0 THEN 's'::bytea ELSE 'x'::bytea END, "
                    "i::text::bytea, 'c', 'f', 'o', "
                    "now() + CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END * interval '1 hour' "
                    "FROM generate_series(1, 4000) AS i"
                ).format(sql.Identifier(table))
            )
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
            conn.execute("SET enable_seqscan = off")  # a small table: ask what the plan can use
            plan = conn.execute(
                sql.SQL(
                    "EXPLAIN SELECT count(*) FROM {} WHERE scope = %s "
                    "AND expires_at > statement_timestamp()"
                ).format(sql.Identifier(table)),
                (b"s",),
            ).fetchall()
            assert "scope_expires_idx" in " ".join(row[0] for row in plan), plan
    finally:
        await store.aclose()


async def test_transactional_outcome_over_the_budget_keeps_a_tombstone_and_the_writes() -> None:
    """Transactional mode: the completion is undone to a savepoint and a
    tombstone recorded in the same transaction; the tool's own writes commit with it."""
    store = await _new_store(max_bytes=64 * 1024)
    try:
        payments = await _payments(store)
        engine = Engine(store)
        big = Outcome(result={"content": [{"type": "text", "text": "y" * 100_000}]})
        runs = 0

        async def run() -> Outcome:
            nonlocal runs
            runs += 1
            await current_connection().execute(
                sql.SQL("INSERT INTO {} VALUES ('tx-big', 5)").format(sql.Identifier(payments))
            )
            return big

        assert await engine.handle(_call("tx-big", transactional=True), run) == big
        retry = await engine.handle(_call("tx-big", transactional=True), run)
        assert _type(retry) == "idempotency_outcome_not_kept"
        assert runs == 1 and await _count(store, payments) == 1
        assert await store.bytes_used() <= 64 * 1024
        assert store.outcomes_not_kept == 1
    finally:
        await store.drop_schema()
        await store.aclose()
