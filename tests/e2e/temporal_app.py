"""The worker process of the Temporal proofs: the example's workflow and activity, and two more.

    python -c "from tests.e2e.temporal_app import main; main()" ADDRESS QUEUE STORE LOG [FLAG]

FLAG: `--crash`, `--hold` or `--example`.

`CrashWorkflow` runs the example's `charge` activity (keyed) or `charge_unkeyed` (the same call
without a key) with a heartbeat, so that Temporal notices a killed worker within
`HEARTBEAT_TIMEOUT` rather than a long start-to-close timeout. With `--crash`, the tool server
this worker spawns SIGKILLs it from inside the tool (tests/e2e/temporal_server.py). With
`--hold`, the worker starts (imports, connects) but polls only after a line on its stdin: the
test starts the next worker while the first one still runs, and lets it poll once that one died.
With `--example`, the worker is the example's own (`example.worker`: its task queue, its
workflow and activity, its `OutcomeUnknownInterceptor`), on this run's tool server; QUEUE is
ignored. The other workers are built as the example's is, with the interceptor.

`UnknownWorkflow` (run by the test's own worker, in process) calls a tool whose answer is
`idempotency_outcome_unknown` and returns what it caught.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from examples import durable_temporal as example
    from idemtools.integrations.temporal import OutcomeUnknownInterceptor, keyed_call

HEARTBEAT_TIMEOUT = timedelta(seconds=3)


async def _with_heartbeat(call: object) -> str:
    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.5)

    beating = asyncio.create_task(beat())
    try:
        return await call  # type: ignore[misc,no-any-return]
    finally:
        beating.cancel()


async def _unkeyed(amount: int) -> str:
    async with (
        stdio_client(example.SERVER) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool("charge", {"amount": amount})
    return str(result.content[0].text)  # type: ignore[union-attr]


@activity.defn
async def charge_beating(amount: int, keyed: bool) -> str:
    return await _with_heartbeat(example.charge(amount) if keyed else _unkeyed(amount))


@workflow.defn
class CrashWorkflow:
    @workflow.run
    async def run(self, amount: int, keyed: bool) -> str:
        return await workflow.execute_activity(
            charge_beating,
            args=[amount, keyed],
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200), maximum_attempts=3
            ),
        )


@activity.defn
async def call_unknown(proxy: list[str], errlog: str) -> str:
    """`die` through the stdio proxy `proxy` (an argv): its upstream exits mid-call, and the
    proxy answers `idempotency_outcome_unknown` (a retry through a new proxy on the same store
    gets that same answer)."""
    server = StdioServerParameters(
        command=proxy[0], args=proxy[1:], env={**os.environ, "PYTHONPATH": str(_root())}
    )
    with open(errlog, "a") as err:  # noqa: ASYNC230 (opened once, before the session)
        async with (
            stdio_client(server, errlog=err) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await keyed_call(session, "die", {"label": "unknown"})
    return str(result)


@workflow.defn
class UnknownWorkflow:
    """Calls `call_unknown` under a retry policy that would allow 3 attempts; returns what the
    workflow caught: the cause's type, whether it was raised non-retryable, the retry state."""

    @workflow.run
    async def run(self, proxy: list[str], errlog: str) -> list[str]:
        try:
            await workflow.execute_activity(
                call_unknown,
                args=[proxy, errlog],
                start_to_close_timeout=timedelta(seconds=60),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(milliseconds=200), maximum_attempts=3
                ),
            )
        except ActivityError as error:
            cause = error.cause
            if not isinstance(cause, ApplicationError):
                raise
            retry_state = error.retry_state.name if error.retry_state is not None else ""
            return [str(cause.type), str(cause.non_retryable), retry_state]
        return ["answered"]


def _root() -> Path:
    # Not at import: the workflow sandbox imports this module too, and forbids file access.
    return Path(__file__).resolve().parents[2]


async def _serve(
    address: str, queue: str, store: str, log: str, crash: bool, hold: bool, as_example: bool
) -> None:
    root = _root()
    env = {"PYTHONPATH": str(root)}
    if crash:
        env["IDEMTOOLS_TEST_KILL_PID"] = str(os.getpid())
    example.SERVER = StdioServerParameters(
        command=sys.executable,
        args=[str(root / "tests" / "e2e" / "temporal_server.py"), store, log],
        env=env,
    )
    client = await Client.connect(address)
    if as_example:
        await example.worker(client)
        return
    if hold:
        await asyncio.to_thread(sys.stdin.readline)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[example.ChargeWorkflow, CrashWorkflow],
        activities=[example.charge, charge_beating],
        interceptors=[OutcomeUnknownInterceptor()],
        max_cached_workflows=0,  # no sticky queue: the next worker gets the workflow at once
    ):
        print("worker ready", flush=True)
        await asyncio.Event().wait()


def main() -> None:
    address, queue, store, log, *rest = sys.argv[1:]
    flags = {
        "crash": "--crash" in rest,
        "hold": "--hold" in rest,
        "as_example": "--example" in rest,
    }
    asyncio.run(_serve(address, queue, store, log, **flags))
