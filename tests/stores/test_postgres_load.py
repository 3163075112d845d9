"""PostgresStore under load: transactional calls that hold every connection of the default pool
must not starve the short statements (claims, completions, releases, replays) of other calls,
nor lose a lease or a record while they wait.

Each transactional call holds its pooled connection for longer than its lease; there are five
times more of them than the default pool has connections, and non-transactional keyed calls
arrive while they run. Every key must run exactly once, every outcome must be recorded and
replay, a duplicate sent while its call still waits must be refused as in progress (its claim
renewed all along), and idemtools must log no warning (no "lease lost", no "could not record
outcome").
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter as Tally
from collections.abc import Iterator

import pytest
from psycopg import sql

from idemtools.engine import Engine
from idemtools.errors import StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.stores.postgres import PostgresStore, current_connection

from ..services import RUN_ID, drop_postgres_tables, need_postgres
from .test_redis import _call, _type

pytestmark = pytest.mark.services

TABLE_PREFIX = f"idemtools_load_{RUN_ID}_"

TRANSACTIONAL_CALLS = 50
PLAIN_CALLS = 20
LEASE = 1.0
HOLD = 1.3  # each transactional tool keeps its connection longer than its lease


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    drop_postgres_tables(TABLE_PREFIX)


async def test_transactions_holding_every_connection_lose_no_lease_or_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = need_postgres()
    suffix = uuid.uuid4().hex[:8]
    table, effects = f"{TABLE_PREFIX}{suffix}", f"{TABLE_PREFIX}fx_{suffix}"
    store = PostgresStore.from_url(url, table=table)  # the default pool: 10 connections
    assert store.pool.max_size * 5 <= TRANSACTIONAL_CALLS
    await store.create_schema()
    async with store.pool.connection() as conn:
        await conn.execute(
            sql.SQL("CREATE TABLE {} (key text PRIMARY KEY)").format(sql.Identifier(effects))
        )
    engine = Engine(store)
    ran: Tally[str] = Tally()

    def answer(key: str) -> Outcome:
        return Outcome(
            result={"content": [{"type": "text", "text": f"done {key}"}], "isError": False}
        )

    async def transactional_run(key: str) -> Outcome:
        ran[key] += 1
        conn = current_connection()
        await conn.execute(
            sql.SQL("INSERT INTO {} (key) VALUES (%s)").format(sql.Identifier(effects)), (key,)
        )
        await asyncio.sleep(HOLD)
        return answer(key)

    async def plain_run(key: str) -> Outcome:
        ran[key] += 1
        return answer(key)

    tx_keys = [f"tx-{i}" for i in range(TRANSACTIONAL_CALLS)]
    plain_keys = [f"plain-{i}" for i in range(PLAIN_CALLS)]

    async def call(key: str, transactional: bool) -> Outcome:
        runner = transactional_run if transactional else plain_run
        return await engine.handle(
            _call(key, lease=LEASE, transactional=transactional), lambda: runner(key)
        )

    caplog.set_level(logging.INFO, logger="idemtools")
    try:
        started = time.monotonic()
        tx_tasks = [asyncio.create_task(call(k, True)) for k in tx_keys]
        await asyncio.sleep(HOLD / 2)  # the transactions now hold every connection
        plain_tasks = [asyncio.create_task(call(k, False)) for k in plain_keys]
        # Three leases after the start, the last transactional calls still wait for a slot:
        # their claims were renewed meanwhile, so a duplicate is refused, not run.
        await asyncio.sleep(max(0.0, 3 * LEASE - (time.monotonic() - started)))
        waiting = [k for k, task in zip(tx_keys, tx_tasks, strict=True) if not task.done()]
        assert waiting, "every transactional call ended within three leases"
        duplicate = await call(waiting[-1], True)
        assert _type(duplicate) == "idempotency_key_in_progress"
        plain = await asyncio.wait_for(asyncio.gather(*plain_tasks), timeout=30)
        first = dict(zip(plain_keys, plain, strict=True))
        first.update(
            zip(tx_keys, await asyncio.wait_for(asyncio.gather(*tx_tasks), timeout=40), strict=True)
        )

        wrong = {k: o.error for k, o in first.items() if o != answer(k)}
        assert wrong == {}
        assert ran == Tally({k: 1 for k in tx_keys + plain_keys})
        async with store.pool.connection() as conn:
            cur = await conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(effects))
            )
            row = await cur.fetchone()
        assert row == (TRANSACTIONAL_CALLS,)

        # Every outcome was recorded: each key replays its answer and nothing runs again.
        for key, outcome in first.items():
            replay = await call(key, key.startswith("tx-"))
            assert replay == outcome, (key, replay)
        assert ran == Tally({k: 1 for k in tx_keys + plain_keys})

        stats = engine.stats
        assert (stats.lost_claims, stats.record_failures, stats.store_errors) == (0, 0, 0)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert warnings == []
    finally:
        async with store.pool.connection() as conn:
            await conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(effects)))
        await engine.aclose()
        await store.aclose()


async def test_transaction_slots_leave_the_reserve_and_bound_the_wait() -> None:
    url = need_postgres()
    table = f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}"
    store = PostgresStore.from_url(url, table=table, max_size=3, transaction_wait=0.3)
    assert store.max_transactions == 1  # 3 connections, 2 of them kept for short statements
    await store.create_schema()
    try:
        assert (await store.claim("s", "held", "fp", "o1", 5)).claimed
        async with store.execution("s", "held", "o1"):
            # The one slot is taken: short statements still run on the reserve ...
            assert (await store.claim("s", "other", "fp", "o2", 5)).claimed
            assert await store.complete("s", "other", "o2", b"x", 60, fingerprint="fp")
            # ... and a second transaction waits for the slot, at most transaction_wait.
            with pytest.raises(StoreUnavailableError, match=r"transactions ran for 0\.3 s"):
                async with store.execution("s", "other", "o2"):
                    pytest.fail("ran without a slot")
        async with store.execution("s", "held", "o1"):  # the slot was given back
            assert await store.complete("s", "held", "o1", b"y", 60, fingerprint="fp")
        record = await store.get("s", "held")
        assert record is not None and record.outcome == b"y"
    finally:
        await store.drop_schema()
        await store.aclose()


def test_transaction_reserve_is_validated() -> None:
    with pytest.raises(ValueError, match="transaction_reserve"):
        PostgresStore.from_url("postgresql://127.0.0.1/none", transaction_reserve=-1)
    with pytest.raises(ValueError, match="transaction_wait"):
        PostgresStore.from_url("postgresql://127.0.0.1/none", transaction_wait=0)
    tiny = PostgresStore.from_url("postgresql://127.0.0.1/none", max_size=1)
    assert tiny.max_transactions == 1  # never zero: a transactional call can always run
