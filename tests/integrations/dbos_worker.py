"""A DBOS worker process for the proofs: runs examples/durable_dbos.py's workflow, or recovers.

    python tests/integrations/dbos_worker.py start WORKFLOW_ID AMOUNT [--unkeyed] [--arm]
    python tests/integrations/dbos_worker.py recover WORKFLOW_ID... [--start WORKFLOW_ID:AMOUNT]...

`start` launches DBOS and starts (or joins) the workflow under WORKFLOW_ID; `--arm` first writes
this process's pid to the server's kill file ($DURABLE_KILL), so the tool's first execution
SIGKILLs this worker. `recover` launches DBOS, which recovers the pending workflows, waits for
each named one, then starts (or joins) each `--start` workflow in turn. `--unkeyed` uses a copy
of the workflow whose step calls the tool without a key. Prints the results, in order, as a
JSON list on its last line.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import sqlalchemy
from dbos import DBOS, SetWorkflowID

from examples import durable_dbos


@sqlalchemy.event.listens_for(sqlalchemy.engine.Engine, "connect")
def _unixepoch(connection: Any, _record: Any) -> None:
    # DBOS's SQLite schema (on Python >= 3.12) uses unixepoch('subsec'), new in SQLite 3.42;
    # on an older SQLite it is NULL and DBOS fails to launch. A stand-in for those only.
    if isinstance(connection, sqlite3.Connection) and sqlite3.sqlite_version_info < (3, 42):
        connection.create_function("unixepoch", -1, lambda *_: time.time())


@DBOS.step()
async def charge_unkeyed(amount: int) -> str:
    """The example's step without the integration: a plain `call_tool`."""
    async with durable_dbos.payments() as session:
        result = await session.call_tool("charge", {"amount": amount})
    return str(result.content[0].text)


@DBOS.workflow()
async def checkout_unkeyed(amount: int) -> str:
    receipt = await charge_unkeyed(amount)
    return f"order paid: {receipt}"


async def start(workflow_id: str, amount: int, unkeyed: bool) -> str:
    workflow = checkout_unkeyed if unkeyed else durable_dbos.checkout
    with SetWorkflowID(workflow_id):
        handle = await DBOS.start_workflow_async(workflow, amount)
    return str(await handle.get_result())


async def recover(workflow_ids: list[str], starts: list[str]) -> list[str]:
    results = []
    for workflow_id in workflow_ids:
        handle: Any = await DBOS.retrieve_workflow_async(workflow_id)
        results.append(str(await handle.get_result()))
    for start_arg in starts:
        workflow_id, amount = start_arg.split(":")
        results.append(await start(workflow_id, int(amount), unkeyed=False))
    return results


def main(argv: list[str]) -> None:
    if "--arm" in argv:
        Path(os.environ["DURABLE_KILL"]).write_text(str(os.getpid()), encoding="utf-8")
    durable_dbos.launch()
    try:
        if argv[0] == "start":
            results = [anyio.run(start, argv[1], int(argv[2]), "--unkeyed" in argv)]
        else:
            rest = argv[1:]
            starts = [rest[i + 1] for i, arg in enumerate(rest) if arg == "--start"]
            ids = [arg for arg in rest if arg != "--start" and arg not in starts]
            results = anyio.run(recover, ids, starts)
    finally:
        DBOS.destroy()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
