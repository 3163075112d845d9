"""A payment tool whose side effect and idempotency record commit together (PostgreSQL).

    python examples/postgres_transactional.py [postgresql://postgres@127.0.0.1:5432/test]

A real MCP server (started by this program over stdio, as an MCP host would) has one tool,
`pay`, declared `@idempotent(transactional=True)`. It writes its payment row through
`current_connection()`, the transaction idemtools opened for the keyed call, and then asks the
"card network", which may decline. The completed idempotency record is written in the same
transaction, so the payment and its record commit together, or not at all:

1. `pay` with a declined card writes its row, then fails: the row is rolled back (the table has
   no payment), and the error is recorded, in its own commit.
2. The client retries with the same key: the error is replayed and the tool does not run again.
3. A new key with a good card: the payment commits once; its retry replays it.

If the server dies between the INSERT and the commit, PostgreSQL rolls back the payment with
the record, and the client's retry (after the lease) pays once: the crash window of the SEP's
"Implementation ordering" section is closed for this tool. The program checks every step and
exits non-zero if one deviates. Its tables carry the process id and are dropped at the end.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools import idempotent, install
from idemtools.client import NO_RETRY, call_tool
from idemtools.stores.postgres import PostgresStore, current_connection

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
HERE = Path(__file__).resolve()


# -- the server (this file again, run as `... --serve URL SUFFIX`) ------------------------------


def build_server(url: str, suffix: str) -> Any:
    try:  # mcp 2.x
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment]

    server = Server("payments-postgres")
    payments = f"example_payments_{suffix}"
    attempts = 0  # in process memory: a rollback cannot hide that the tool ran

    @server.tool()
    @idempotent(transactional=True, lease=30, retention=24 * 3600)
    async def pay(order_id: str, amount_cents: int, card: str) -> str:
        """Record the payment, then charge the card: a decline must leave no payment behind."""
        nonlocal attempts
        attempts += 1
        conn = current_connection()  # the idempotency transaction; never commit it yourself
        cur = await conn.execute(
            f"INSERT INTO {payments} (order_id, amount_cents) VALUES (%s, %s) RETURNING id",
            (order_id, amount_cents),
        )
        row = await cur.fetchone()
        assert row is not None
        if card.endswith("0002"):  # the card network declines this test card
            raise ValueError(f"card {card} declined; payment {row[0]} must not be kept")
        return f"payment {row[0]} for {order_id}"

    @server.tool()
    async def tool_runs() -> int:
        """How many times `pay` really ran in this server process."""
        return attempts

    install(server, store=PostgresStore.from_url(url, table=f"example_idem_{suffix}"))
    return server


# -- the client ---------------------------------------------------------------------------------

failures: list[str] = []
once = functools.partial(call_tool, retry=NO_RETRY)  # one attempt: we play the retries by hand


def check(ok: bool, what: str) -> None:
    print(f"   {'ok ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def wire(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def scenarios(session: ClientSession, store: PostgresStore, payments: str) -> None:
    async def rows(order_id: str) -> int:
        async with store.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT count(*) FROM {payments} WHERE order_id = %s", (order_id,)
            )
            found = await cur.fetchone()
        return int(found[0]) if found else -1

    async def runs() -> int:
        result = await session.call_tool("tool_runs", {})
        return int(text(result))

    declined = {"order_id": "A-1001", "amount_cents": 4200, "card": "4000-0000-0000-0002"}
    print("1. the tool writes its payment row, then the card is declined")
    first = await once(session, "pay", declined, idempotency_key="order-A-1001-try-1")
    print(f"      isError={wire(first).get('isError')}: {text(first)!r}")
    check(wire(first).get("isError") is True, "the call failed")
    check(await rows("A-1001") == 0, "nothing was committed: no payment row for A-1001")
    check(await runs() == 1, "the tool ran once")

    print("2. the client retries with the same key (the answer was lost, say)")
    again = await once(session, "pay", declined, idempotency_key="order-A-1001-try-1")
    check(wire(again) == wire(first), "the recorded error was replayed, identical")
    check(await runs() == 1, "the tool did not run again")
    check(await rows("A-1001") == 0, "still no payment row")

    print("3. a new attempt (new key) with a good card pays once")
    good = {**declined, "card": "4242-4242-4242-4242"}
    paid = await once(session, "pay", good, idempotency_key="order-A-1001-try-2")
    print(f"      {text(paid)!r}")
    check(wire(paid).get("isError") is not True, "the payment succeeded")
    replay = await once(session, "pay", good, idempotency_key="order-A-1001-try-2")
    check(wire(replay) == wire(paid), "its retry got the same answer")
    check(await runs() == 2, "the tool ran once more, not twice")
    check(await rows("A-1001") == 1, "one payment row, committed with its record")


async def main(url: str) -> int:
    suffix = str(os.getpid())
    payments = f"example_payments_{suffix}"
    store = PostgresStore.from_url(url, table=f"example_idem_{suffix}")
    await store.create_schema()  # explicit; or apply PostgresStore.schema_sql() in a migration
    async with store.pool.connection() as conn:
        await conn.execute(
            f"CREATE TABLE {payments} ("
            " id bigserial PRIMARY KEY, order_id text NOT NULL, amount_cents int NOT NULL)"
        )
    # Our own server: it gets this environment (PYTHONPATH included), not the SDK's short list.
    params = StdioServerParameters(
        command=sys.executable, args=[str(HERE), "--serve", url, suffix], env=dict(os.environ)
    )
    # The server's log (the declined card's traceback) goes to a file, not to this output.
    log_path = Path(tempfile.gettempdir()) / "idemtools-postgres-example-server.log"
    try:
        with log_path.open("w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                await scenarios(session, store, payments)
    finally:
        async with store.pool.connection() as conn:
            await conn.execute(f"DROP TABLE IF EXISTS {payments}")
        await store.drop_schema()
        await store.aclose()
    if failures:
        print(f"{len(failures)} check(s) FAILED: {failures} (server log: {log_path})")
        return 1
    print("The failed payment left nothing behind; the good one committed once.")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        build_server(sys.argv[2], sys.argv[3]).run()  # stdio
    else:
        sys.exit(anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else DEFAULT_URL))
