"""A LangGraph worker killed after the tool ran and before LangGraph saved the task's result:
resuming the thread runs the task again, and with `idemtools.integrations.langgraph` the tool
still ran once.

Real processes: an idemtools server (streamable HTTP, SQLite store file) and LangGraph workers
(examples/durable_langgraph.py's functional-API workflow) whose checkpointer is LangGraph's own
`AsyncSqliteSaver` (langgraph-checkpoint-sqlite) on one database file, which the killed worker
and the workers after it open in turn. The server's tool SIGKILLs the armed worker right after
its side effect. Without the key the resumed task runs the tool a
second time (the fault is real). A new run of the same thread (new input) is a new operation:
LangGraph saves a new checkpoint for it, and task ids derive from the checkpoint's id.
"""

from __future__ import annotations

import signal
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from .durable import HERE, Payments, payments_server, results_of, run_worker

pytest.importorskip("langgraph.func", reason="langgraph is not installed (the langgraph extra)")
pytest.importorskip(
    "langgraph.checkpoint.sqlite.aio",
    reason="langgraph-checkpoint-sqlite is not installed (the langgraph extra)",
)
pytest.importorskip(
    "mcp.server.mcpserver", reason="the durable-workflow proofs run on mcp 2.x (the 3.13 leg)"
)

pytestmark = [pytest.mark.slow, pytest.mark.once]

WORKER = HERE / "langgraph_worker.py"


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[Payments]:
    with payments_server(tmp_path) as server:
        yield server


def test_a_resumed_task_runs_the_tool_once_with_the_key_and_twice_without(
    payments: Payments, tmp_path: Path
) -> None:
    env = payments.env()
    log = payments.log.with_name("workers.log")
    checkpoints = str(tmp_path / "checkpoints.sqlite")
    keyed, unkeyed = (f"thread-{uuid.uuid4().hex[:8]}-{n}" for n in range(2))

    def killed(*args: str) -> None:
        finished = run_worker(WORKER, [checkpoints, *args, "--arm"], env, log)
        assert finished.returncode == -signal.SIGKILL, finished.stderr[-3000:]

    killed(f"{keyed}:42")
    killed(f"{unkeyed}:43", "--unkeyed")
    assert (payments.charges(42), payments.charges(43)) == (1, 1), "each ran, then the kill"
    # What the killed workers left is in the database file: each thread's checkpoints.
    with closing(sqlite3.connect(checkpoints)) as db:
        saved = {row[0] for row in db.execute("SELECT DISTINCT thread_id FROM checkpoints")}
    assert saved == {keyed, unkeyed}

    # New workers resume each thread: the entrypoint runs again, and so does the task.
    resumed = run_worker(WORKER, [checkpoints, f"{keyed}:resume", f"{keyed}:42"], env, log)
    keyed_result, new_run = results_of(resumed)
    assert keyed_result == "order paid: charged 42 usd (charge #1)", "the first run's answer"
    assert payments.charges(42) == 2, "one execution for the resumed run, one for the new run"
    # The same thread, invoked again with the same input: a new run, a new operation.
    assert new_run == "order paid: charged 42 usd (charge #2)"

    resumed = run_worker(WORKER, [checkpoints, f"{unkeyed}:resume", "--unkeyed"], env, log)
    assert results_of(resumed) == ["order paid: charged 43 usd (charge #2)"]
    assert payments.charges(43) == 2, "the fault is real: without a key the re-run charges again"
