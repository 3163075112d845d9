"""Exactly once from a LangGraph workflow: a functional-API task charges through an MCP tool.

    python examples/payments_server.py --http 8765 &          # any idemtools server
    python examples/durable_langgraph.py order-42 4200        # thread id, amount
    python examples/durable_langgraph.py order-42 --resume    # after a crash: finish the run

If the process dies after the server charged and before LangGraph saved the task's result,
resuming the thread runs the task again: the same key goes out, and the server replays the
first charge's answer instead of charging twice. Invoking the thread again with input is a new
run: a new charge.

Settings (environment): PAYMENTS_URL (default http://127.0.0.1:8765/mcp), PAYMENTS_TOKEN (sent
as `Authorization: Bearer …`; default demo-checkout), CHECKPOINTS (the checkpoint file; default
durable_langgraph.pickle). Needs mcp 2.x and `pip install "idemtools[langgraph]"`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2  # mcp 2.x's HTTP client
from langgraph.checkpoint.memory import InMemorySaver
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


class FileSaver(InMemorySaver):
    """LangGraph's in-memory saver, written to one file (atomically, fsynced) on every change.

    For this example only: it survives a killed process, as a database saver does. In
    production use a database checkpointer (langgraph-checkpoint-postgres or -sqlite)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._lock = threading.Lock()
        if self.path.exists():
            storage, writes, blobs = pickle.loads(self.path.read_bytes())
            for thread, namespaces in storage.items():
                for namespace, checkpoints in namespaces.items():
                    self.storage[thread][namespace].update(checkpoints)
            self.writes.update(writes)
            self.blobs.update(blobs)

    def _save(self) -> None:
        with self._lock:
            storage = {t: {ns: dict(c) for ns, c in n.items()} for t, n in self.storage.items()}
            data = pickle.dumps((storage, dict(self.writes), dict(self.blobs)))
            temporary = self.path.with_name(self.path.name + ".tmp")
            with temporary.open("wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, self.path)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        config = super().put(*args, **kwargs)
        self._save()
        return config

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        super().put_writes(*args, **kwargs)
        self._save()

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self._save()


async def run(checkout: Any, thread_id: str, amount: int | None) -> str:
    """A new run of the thread with `amount`; None resumes the thread's unfinished run."""
    config = {"configurable": {"thread_id": thread_id}}
    # "sync": each step's checkpoint is saved before the next step runs, so a crash never
    # loses the checkpoint a task's id derives from.
    return str(await checkout.ainvoke(amount, config, durability="sync"))


def main(argv: list[str]) -> None:
    saver = FileSaver(os.environ.get("CHECKPOINTS", "durable_langgraph.pickle"))
    amount = None if argv[1] == "--resume" else int(argv[1])
    print(anyio.run(run, checkout_with(saver), argv[0], amount))


if __name__ == "__main__":
    main(sys.argv[1:])
