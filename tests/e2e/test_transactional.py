"""PostgreSQL transactional mode through a real MCP server: the tool writes through the
idempotency transaction, so its row and its completed record commit together."""

from __future__ import annotations

from typing import Any

import pytest

from idemtools import idempotent, shared
from idemtools.policy import Registry

from ..services import RUN_ID, need_postgres
from .harness import _Server, memory_wire, result_text

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
