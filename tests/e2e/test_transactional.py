"""PostgreSQL transactional mode through a real MCP server: the tool writes through the
idempotency transaction, so its row and its completed record commit together."""

from __future__ import annotations

from typing import Any

import pytest

from idemtools import idempotent, shared
from idemtools.policy import Registry

from ..services import RUN_ID, need_postgres
from .harness import _Server, error_type, memory_wire, result_text

pytestmark = pytest.mark.services


async def test_side_effect_and_record_commit_together() -> None:
    import idemtools
    from idemtools.stores.postgres import PostgresStore, current_connection

    url = need_postgres()
    table = f"idem_tx_{RUN_ID}"
    payments = f"payments_tx_{RUN_ID}"
    store = PostgresStore.from_url(url, table=table)
    await store.create_schema()
    async with store.pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {payments} (id bigserial PRIMARY KEY, amount int)")
    registry = Registry()
    server = _Server("tx")

    @server.tool()
    @idempotent(transactional=True, scope=shared, registry=registry)
    async def pay(amount: int) -> str:
        conn = current_connection()  # the transaction idemtools opened for this keyed call
        cur = await conn.execute(
            f"INSERT INTO {payments} (amount) VALUES (%s) RETURNING id", (amount,)
        )
        row = await cur.fetchone()
        assert row is not None
        return f"payment {row[0]}"

    idemtools.install(server, store=store, registry=registry)
    app: Any = type("A", (), {"server": server})()
    try:
        async with memory_wire(app) as wire:
            params = {"name": "pay", "arguments": {"amount": 42}, "idempotencyKey": "k-tx"}
            first = await wire.call(params)
            again = await wire.call(params)
        assert result_text(first).startswith("payment ")
        assert again["result"] == first["result"]
        async with store.pool.connection() as conn:
            cur = await conn.execute(f"SELECT count(*) FROM {payments}")
            count = await cur.fetchone()
        assert count is not None and count[0] == 1
    finally:
        async with store.pool.connection() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {payments}")
        await store.drop_schema()
        await store.aclose()


async def test_a_tool_that_fails_after_writing_keeps_nothing() -> None:
    """It wrote a row, then raised (or its own SQL failed): the row is rolled back, the error
    record commits, and the retry replays the error without running the tool again."""
    import idemtools
    from idemtools.stores.postgres import PostgresStore, current_connection

    url = need_postgres()
    table = f"idem_txfail_{RUN_ID}"
    payments = f"payments_txfail_{RUN_ID}"
    store = PostgresStore.from_url(url, table=table)
    await store.create_schema()
    async with store.pool.connection() as conn:
        await conn.execute(
            f"CREATE TABLE {payments} (id bigserial PRIMARY KEY, amount int CHECK (amount < 1000))"
        )
    registry = Registry()
    server = _Server("txfail")
    runs: list[int] = []

    @server.tool()
    @idempotent(transactional=True, scope=shared, registry=registry)
    async def pay(amount: int, decline: bool = False) -> str:
        runs.append(amount)
        conn = current_connection()
        await conn.execute(f"INSERT INTO {payments} (amount) VALUES (%s)", (amount,))
        if decline:
            raise RuntimeError("card declined after the row was written")
        await conn.execute(f"INSERT INTO {payments} (amount) VALUES (%s)", (amount * 10,))
        return "paid"

    async def rows() -> int:
        async with store.pool.connection() as conn:
            cur = await conn.execute(f"SELECT count(*) FROM {payments}")
            found = await cur.fetchone()
        assert found is not None
        return int(found[0])

    idemtools.install(server, store=store, registry=registry)
    app: Any = type("A", (), {"server": server})()
    try:
        async with memory_wire(app) as wire:
            declined = {"name": "pay", "arguments": {"amount": 5, "decline": True}}
            first = await wire.call({**declined, "idempotencyKey": "k-declined"})
            assert first["result"]["isError"] is True, first
            assert await rows() == 0  # the row it wrote before failing was rolled back
            again = await wire.call({**declined, "idempotencyKey": "k-declined"})
            assert again["result"] == first["result"] and runs == [5]  # replayed, not re-run

            # Its own second INSERT violates the CHECK: the SQL error aborts the transaction,
            # the savepoint undoes it, and the error is recorded like any other.
            broken = {"name": "pay", "arguments": {"amount": 500}, "idempotencyKey": "k-sql"}
            failed = await wire.call(broken)
            assert error_type(failed) is None and failed["result"]["isError"] is True, failed
            assert (await wire.call(broken))["result"] == failed["result"]
            assert runs == [5, 500] and await rows() == 0

            paid = {"name": "pay", "arguments": {"amount": 7}, "idempotencyKey": "k-paid"}
            assert result_text(await wire.call(paid)) == "paid"
            assert result_text(await wire.call(paid)) == "paid"
            assert runs == [5, 500, 7] and await rows() == 2  # both rows, committed once
    finally:
        async with store.pool.connection() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {payments}")
        await store.drop_schema()
        await store.aclose()


@pytest.mark.slow
def test_the_example_program_shows_the_rollback() -> None:
    """examples/postgres_transactional.py: a real stdio server and client, checking itself."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    url = need_postgres()
    example = Path(__file__).resolve().parents[2] / "examples" / "postgres_transactional.py"
    root = str(example.parents[1])
    done = subprocess.run(
        [sys.executable, str(example), url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},  # this checkout's idemtools, in both processes
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout
    for step in (
        "nothing was committed: no payment row for A-1001",
        "the recorded error was replayed, identical",
        "the tool did not run again",
        "one payment row, committed with its record",
    ):
        assert f"ok  {step}" in done.stdout, step
