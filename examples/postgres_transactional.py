"""A payment tool whose side effect and idempotency record commit together (PostgreSQL).

    python examples/postgres_transactional.py [postgresql://postgres@127.0.0.1:5432/test]

The tool writes its payment row through `current_connection()`, the connection of the
transaction idemtools opened for this keyed call; the completed idempotency record is written in
the same transaction. So either both are committed or neither is: if the server dies after the
INSERT and before the commit, PostgreSQL rolls the payment back with the record, and the client's
retry (after the lease) pays once — the crash window of the SEP's "Implementation ordering"
section is closed for this tool.

The MCP wiring is left out on purpose (the adapter is `idemtools.install(server)`); this drives
the engine directly, exactly as the adapter does for a `tools/call` carrying an idempotencyKey.
"""

from __future__ import annotations

import asyncio
import sys

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.policy import Registry, idempotent
from idemtools.scopes import shared
from idemtools.stores.postgres import PostgresStore, current_connection

registry = Registry()


@idempotent(transactional=True, lease=30, retention=24 * 3600, scope=shared, registry=registry)
async def pay(order_id: str, amount_cents: int) -> dict[str, object]:
    conn = current_connection()  # the idempotency transaction; do not commit it yourself
    cur = await conn.execute(
        "INSERT INTO payments (order_id, amount_cents) VALUES (%s, %s) RETURNING id",
        (order_id, amount_cents),
    )
    row = await cur.fetchone()
    assert row is not None
    return {"content": [{"type": "text", "text": f"payment {row[0]} for {order_id}"}]}


async def main(url: str) -> None:
    store = PostgresStore.from_url(url)
    await store.create_schema()  # explicit; or apply PostgresStore.schema_sql() in a migration
    async with store.pool.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS payments ("
            " id bigserial PRIMARY KEY, order_id text NOT NULL, amount_cents int NOT NULL)"
        )
    engine = Engine(store, registry=registry)

    async def call(key: str) -> Outcome:
        arguments = {"order_id": "A-1001", "amount_cents": 4200}

        async def run() -> Outcome:  # what the adapter does: run the tool, wrap its result
            return Outcome(result={**await pay(**arguments), "isError": False})

        return await engine.handle(ToolCall(name="pay", arguments=arguments, key=key), run)

    key = "example-payment-key-1"
    first = await call(key)
    retry = await call(key)  # the client lost the answer and retried
    print("first:", first.result)
    print("retry:", retry.result, "(replayed)" if retry.replayed else "")
    async with store.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM payments WHERE order_id = 'A-1001'")
        print("payments for A-1001:", (await cur.fetchone() or [0])[0])
    await store.aclose()


if __name__ == "__main__":
    asyncio.run(
        main(sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/test")
    )
