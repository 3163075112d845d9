"""Exactly once from a DBOS workflow: its step charges through an MCP tool with a derived key.

    python examples/payments_server.py --http 8765 &          # any idemtools server
    python examples/durable_dbos.py order-42 4200             # workflow id, amount

If the process dies after the server charged and before DBOS recorded the step, the next launch
recovers the workflow and runs the step again: the same key goes out, and the server replays
the first charge's answer instead of charging twice. Starting `order-42` again returns the
recorded result; a new workflow id is a new charge.

Settings (environment): PAYMENTS_URL (default http://127.0.0.1:8765/mcp), PAYMENTS_TOKEN (sent
as `Authorization: Bearer …`; default demo-checkout), DBOS_SYSTEM_DATABASE_URL (default
sqlite:///durable_dbos.sqlite; postgresql://… works the same). Needs mcp 2.x and
`pip install "idemtools[dbos]"`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2  # mcp 2.x's HTTP client
from dbos import DBOS, SetWorkflowID
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from idemtools.integrations.dbos import keyed_call


@contextlib.asynccontextmanager
async def payments() -> AsyncIterator[Any]:
    """An initialized session with the payments server."""
    url = os.environ.get("PAYMENTS_URL", "http://127.0.0.1:8765/mcp")
    token = os.environ.get("PAYMENTS_TOKEN", "demo-checkout")
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)
        ) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


# Retries? @DBOS.step(retries_allowed=True, should_retry=should_retry): never an unknown outcome
@DBOS.step()
async def charge(amount: int) -> str:
    """One step, one charge: the key comes from this step's workflow id and step id."""
    async with payments() as session:
        result = await keyed_call(session, "charge", {"amount": amount})
    return str(result.content[0].text)


@DBOS.workflow()
async def checkout(amount: int) -> str:
    receipt = await charge(amount)
    return f"order paid: {receipt}"


def launch() -> None:
    """Configure DBOS and launch it: pending workflows of this executor are recovered now."""
    url = os.environ.get("DBOS_SYSTEM_DATABASE_URL", "sqlite:///durable_dbos.sqlite")
    DBOS(config={"name": "durable-checkout", "system_database_url": url})
    DBOS.launch()


async def run(order_id: str, amount: int) -> str:
    """Start (or, if `order_id` exists, join) the checkout workflow and wait for its result."""
    with SetWorkflowID(order_id):
        handle = await DBOS.start_workflow_async(checkout, amount)
    return str(await handle.get_result())


def main(argv: list[str]) -> None:
    launch()
    try:
        print(anyio.run(run, argv[0], int(argv[1])))
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main(sys.argv[1:])
