"""Exactly once from a LangGraph workflow: a functional-API task charges through an MCP tool.

    python examples/payments_server.py --http 8765 &          # any idemtools server
    python examples/durable_langgraph.py order-42 4200        # thread id, amount
    python examples/durable_langgraph.py order-42 --resume    # after a crash: finish the run

If the process dies after the server charged and before LangGraph saved the task's result,
resuming the thread runs the task again: the same key goes out, and the server replays the
first charge's answer instead of charging twice. Invoking the thread again with input is a new
run: a new charge.

The checkpoints are in a SQLite file, through LangGraph's own `AsyncSqliteSaver`
(langgraph-checkpoint-sqlite); several workers on several machines would share a PostgreSQL
checkpointer instead (langgraph-checkpoint-postgres).

Settings (environment): PAYMENTS_URL (default http://127.0.0.1:8765/mcp), PAYMENTS_TOKEN (sent
as `Authorization: Bearer …`; default demo-checkout), CHECKPOINTS (the checkpoint database file;
default durable_langgraph.sqlite). Needs mcp 2.x and `pip install "idemtools[langgraph]"`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2  # mcp 2.x's HTTP client
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.func import entrypoint, task
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from idemtools.integrations.langgraph import keyed_call


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


# Retries? @task(retry_policy=RetryPolicy(retry_on=retry_on)): never an unknown outcome
@task
async def charge(amount: int) -> str:
    """One task, one charge: the key comes from this task's thread, namespace and task id."""
    async with payments() as session:
        result = await keyed_call(session, "charge", {"amount": amount})
    return str(result.content[0].text)


def checkout_with(checkpointer: Any) -> Any:
    """The checkout workflow, saving its progress with `checkpointer`."""

    @entrypoint(checkpointer=checkpointer)
    async def checkout(amount: int) -> str:
        receipt = await charge(amount)
        return f"order paid: {receipt}"

    return checkout


@contextlib.asynccontextmanager
async def checkpoints(path: str | None = None) -> AsyncIterator[AsyncSqliteSaver]:
    """LangGraph's SQLite checkpointer on a file: it commits every checkpoint and every task's
    result as LangGraph saves them, so they outlive a killed process."""
    path = path or os.environ.get("CHECKPOINTS", "durable_langgraph.sqlite")
    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        yield saver


async def run(checkout: Any, thread_id: str, amount: int | None) -> str:
    """A new run of the thread with `amount`; None resumes the thread's unfinished run."""
    config = {"configurable": {"thread_id": thread_id}}
    # "sync": each step's checkpoint is saved before the next step runs, so a crash never
    # loses the checkpoint a task's id derives from.
    return str(await checkout.ainvoke(amount, config, durability="sync"))


async def checkout_once(thread_id: str, amount: int | None) -> str:
    """Run (or, with None, resume) the thread once, its checkpoints open meanwhile."""
    async with checkpoints() as saver:
        return await run(checkout_with(saver), thread_id, amount)


def main(argv: list[str]) -> None:
    amount = None if argv[1] == "--resume" else int(argv[1])
    print(anyio.run(checkout_once, argv[0], amount))


if __name__ == "__main__":
    main(sys.argv[1:])
