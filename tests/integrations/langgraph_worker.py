"""A LangGraph worker process for the proofs: examples/durable_langgraph.py's workflow.

    python tests/integrations/langgraph_worker.py CHECKPOINTS RUN... [--unkeyed] [--arm]

CHECKPOINTS: the SQLite file of the example's checkpointer (LangGraph's `AsyncSqliteSaver`).

Each RUN is `THREAD:AMOUNT` (a new run of the thread with that input) or `THREAD:resume` (finish
the thread's unfinished run), done in turn. `--arm` first writes this process's pid to the
server's kill file ($DURABLE_KILL), so the tool's first execution SIGKILLs this worker.
`--unkeyed` uses a copy of the workflow whose task calls the tool without a key. Prints the
results, in order, as a JSON list on its last line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from langgraph.func import entrypoint, task

from examples import durable_langgraph


@task
async def charge_unkeyed(amount: int) -> str:
    """The example's task without the integration: a plain `call_tool`."""
    async with durable_langgraph.payments() as session:
        result = await session.call_tool("charge", {"amount": amount})
    return str(result.content[0].text)


def unkeyed_checkout_with(checkpointer: Any) -> Any:
    @entrypoint(checkpointer=checkpointer)
    async def checkout(amount: int) -> str:
        receipt = await charge_unkeyed(amount)
        return f"order paid: {receipt}"

    return checkout


async def main(argv: list[str]) -> list[str]:
    make = unkeyed_checkout_with if "--unkeyed" in argv else durable_langgraph.checkout_with
    results = []
    async with durable_langgraph.checkpoints(argv[0]) as saver:
        checkout = make(saver)
        for run in (arg for arg in argv[1:] if not arg.startswith("--")):
            thread, value = run.split(":")
            amount = None if value == "resume" else int(value)
            results.append(await durable_langgraph.run(checkout, thread, amount))
    return results


if __name__ == "__main__":
    if "--arm" in sys.argv:
        Path(os.environ["DURABLE_KILL"]).write_text(str(os.getpid()), encoding="utf-8")
    print(json.dumps(anyio.run(main, sys.argv[1:])), flush=True)
