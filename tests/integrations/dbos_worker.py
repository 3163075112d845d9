"""A DBOS worker process for the proofs: runs examples/durable_dbos.py's workflow, or recovers.

    python tests/integrations/dbos_worker.py start WORKFLOW_ID AMOUNT [--MODE] [--arm]
    python tests/integrations/dbos_worker.py recover WORKFLOW_ID... [--start WORKFLOW_ID:AMOUNT]...

`start` launches DBOS and starts (or joins) the workflow under WORKFLOW_ID; `--arm` first writes
this process's pid to the server's kill file ($DURABLE_KILL), so the tool's first execution
SIGKILLs this worker. `recover` launches DBOS, which recovers the pending workflows, waits for
each named one, then starts (or joins) each `--start` workflow in turn. MODE: `unkeyed`, a copy
of the workflow whose step calls the tool without a key; `agent` and `agent-rule`, pydantic-ai's
`DBOSAgent` (see `_agents`). Prints the results, in order, as a JSON list on its last line.
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


def _agents() -> dict[str, Any]:
    """pydantic-ai agents under `DBOSAgent`: a model that calls `charge` once, then answers.

    "agent": `KeyedMCPToolset(key_for=idemtools.integrations.dbos.key_for)`, keys derived from
    the tool-call step; "agent-rule": the same toolset without it (KeyedSession's in-memory
    rule, which a new process cannot repeat)."""
    try:
        from pydantic_ai import Agent
        from pydantic_ai.durable_exec.dbos import DBOSAgent
        from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
        from pydantic_ai.models.function import AgentInfo, FunctionModel

        from idemtools.integrations.dbos import key_for
        from idemtools.integrations.pydantic_ai import KeyedMCPToolset
    except ImportError:
        return {}

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts: list[Any] = [part for message in messages for part in message.parts]
        returns = [p for p in parts if getattr(p, "part_kind", "") == "tool-return"]
        if returns:
            return ModelResponse(parts=[TextPart(f"order paid: {returns[-1].content}")])
        prompt = [p for p in parts if getattr(p, "part_kind", "") == "user-prompt"][-1]
        return ModelResponse(parts=[ToolCallPart("charge", {"amount": int(prompt.content)})])

    agents = {}
    for mode, derive in (("agent", key_for), ("agent-rule", None)):
        toolset = KeyedMCPToolset(os.environ["PAYMENTS_URL"], id="payments", key_for=derive)
        name = mode.replace("-", "_")
        agents[mode] = DBOSAgent(Agent(FunctionModel(model), name=name, toolsets=[toolset]))
    return agents


AGENTS = _agents()


async def start(workflow_id: str, amount: int, mode: str) -> str:
    if mode in AGENTS:
        with SetWorkflowID(workflow_id):
            run = await AGENTS[mode].run(str(amount))
        return str(run.output)
    workflow = checkout_unkeyed if mode == "unkeyed" else durable_dbos.checkout
    with SetWorkflowID(workflow_id):
        handle = await DBOS.start_workflow_async(workflow, amount)
    return str(await handle.get_result())


async def recover(workflow_ids: list[str], starts: list[str]) -> list[str]:
    results = []
    for workflow_id in workflow_ids:
        handle: Any = await DBOS.retrieve_workflow_async(workflow_id)
        result = await handle.get_result()
        results.append(str(getattr(result, "output", result)))
    for start_arg in starts:
        workflow_id, amount = start_arg.split(":")
        results.append(await start(workflow_id, int(amount), "keyed"))
    return results


def main(argv: list[str]) -> None:
    if "--arm" in argv:
        Path(os.environ["DURABLE_KILL"]).write_text(str(os.getpid()), encoding="utf-8")
    durable_dbos.launch()
    try:
        if argv[0] == "start":
            modes = [arg[2:] for arg in argv if arg in ("--unkeyed", "--agent", "--agent-rule")]
            results = [anyio.run(start, argv[1], int(argv[2]), (modes or ["keyed"])[0])]
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
