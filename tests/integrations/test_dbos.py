"""A DBOS worker killed after the tool ran and before DBOS recorded the step: recovery runs the
step again, and with `idemtools.integrations.dbos` the tool still ran once.

Real processes: an idemtools server (streamable HTTP, SQLite store file) and DBOS workers
(examples/durable_dbos.py's workflow), on a SQLite and on a PostgreSQL system database (a fresh
database, dropped after). The server's tool SIGKILLs the armed worker right after its side
effect, so the crash falls exactly between the execution and the engine's record of it. Without
the key the recovered step runs the tool a second time (the fault is real).

A second run of the same workflow id does not execute again: the workflow id is DBOS's own
idempotency key, and starting a finished workflow's id returns DBOS's recorded result (the tool
does not run, whatever the key). Only a new workflow id executes again: a new operation.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.services import need_postgres

from .durable import HERE, Payments, payments_server, results_of, run_worker

pytest.importorskip("dbos", reason="dbos is not installed (the dbos extra)")
pytest.importorskip(
    "mcp.server.mcpserver", reason="the durable-workflow proofs run on mcp 2.x (the 3.13 leg)"
)

pytestmark = [pytest.mark.slow, pytest.mark.once]

WORKER = HERE / "dbos_worker.py"


def _postgres_database() -> Iterator[str]:
    import psycopg

    url = need_postgres()
    name = f"idemtools_dbos_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.services)])
def system_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """DBOS's system database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    else:
        yield from _postgres_database()


@pytest.fixture
def payments(tmp_path: Path) -> Iterator[Payments]:
    with payments_server(tmp_path) as server:
        yield server


def test_a_recovered_step_runs_the_tool_once_and_the_same_workflow_id_returns_dbos_record(
    payments: Payments, system_database: str
) -> None:
    """With the key, a recovered step's tool ran once (without: twice). Starting the same
    workflow id again returns DBOS's recorded result, nothing executes; a new workflow id
    executes again."""
    env = {**payments.env(), "DBOS_SYSTEM_DATABASE_URL": system_database}
    log = payments.log.with_name("workers.log")
    keyed, unkeyed, new = (f"order-{uuid.uuid4().hex[:8]}-{n}" for n in range(3))

    def killed(*args: str) -> None:
        finished = run_worker(WORKER, [*args, "--arm"], env, log)
        assert finished.returncode == -signal.SIGKILL, finished.stderr[-3000:]

    killed("start", keyed, "42")
    killed("start", unkeyed, "43", "--unkeyed")
    assert (payments.charges(42), payments.charges(43)) == (1, 1), "each ran, then the kill"

    # A new worker: DBOS recovers both workflows and re-runs their interrupted steps.
    recovered = run_worker(
        WORKER,
        ["recover", keyed, unkeyed, "--start", f"{keyed}:42", "--start", f"{new}:44"],
        env,
        log,
    )
    keyed_result, unkeyed_result, keyed_again, new_result = results_of(recovered)

    assert keyed_result == "order paid: charged 42 usd (charge #1)", "the first run's answer"
    assert payments.charges(42) == 1, "the re-run step sent the same key: the tool ran once"

    assert unkeyed_result == "order paid: charged 43 usd (charge #2)"
    assert payments.charges(43) == 2, "the fault is real: without a key the re-run charges again"

    # The same workflow id started again after completion: DBOS returns its recorded result
    # (the workflow id is DBOS's own idempotency key); nothing executes.
    assert keyed_again == keyed_result, "the same workflow id: DBOS's recorded result"
    assert payments.charges(42) == 1, "the same workflow id did not execute again"
    # A new workflow id is a new operation: it executes.
    assert new_result == "order paid: charged 44 usd (charge #1)"
    assert payments.charges(44) == 1, "a new workflow id executes again"


def test_pydantic_ai_dbos_agent_with_the_derived_key_runs_the_tool_once(
    payments: Payments, tmp_path: Path
) -> None:
    """pydantic-ai's `DBOSAgent` runs each MCP tool call as a DBOS step; `KeyedMCPToolset`
    with `key_for=idemtools.integrations.dbos.key_for` sends that step's derived key. Without
    it, KeyedSession's in-memory rule picks a key the recovering process cannot know."""
    pytest.importorskip("pydantic_ai.durable_exec.dbos", reason="pydantic-ai is not installed")
    pytest.importorskip("fastmcp", reason="fastmcp is not installed (the pydantic-ai extra)")
    env = {**payments.env(), "DBOS_SYSTEM_DATABASE_URL": f"sqlite:///{tmp_path / 'dbos.sqlite'}"}
    log = payments.log.with_name("workers.log")
    derived, rule = (f"agent-{uuid.uuid4().hex[:8]}-{n}" for n in range(2))

    for run in (["start", derived, "45", "--agent"], ["start", rule, "46", "--agent-rule"]):
        finished = run_worker(WORKER, [*run, "--arm"], env, log)
        assert finished.returncode == -signal.SIGKILL, finished.stderr[-3000:]
    assert (payments.charges(45), payments.charges(46)) == (1, 1)

    derived_result, rule_result = results_of(
        run_worker(WORKER, ["recover", derived, rule], env, log)
    )
    assert derived_result == "order paid: charged 45 usd (charge #1)"
    assert payments.charges(45) == 1, "the recovered tool-call step sent the same key"
    assert rule_result == "order paid: charged 46 usd (charge #2)"
    assert payments.charges(46) == 2, "the in-memory rule's key died with the worker"
