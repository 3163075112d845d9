"""`idempotency_outcome_unknown` in a durable workflow: one attempt, and the workflow gets it.

A retry of the step would send the same key and get the same answer, so no engine may retry
it: the application decides, under a new key. The answer is real: the stdio proxy's upstream
dies inside `die` (tests/proxy/upstream.py), and the proxy answers `idempotency_outcome_unknown`;
a retry through a new proxy on the same store gets that answer again. The session is opened
inside the step, as in the examples, so what the step raises is wrapped in the session's
exception groups; LangGraph also with a session opened outside the task, where the error
reaches the engine bare. (Temporal: tests/e2e/test_temporal.py, on a real dev server; its
interceptor's rule is checked here.)
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools.client import OutcomeUnknownError
from idemtools.integrations._durable import outcome_unknown_in
from tests.proxy.helpers import ROOT, executions, proxy_argv, upstream_argv

if sys.version_info < (3, 11):
    from exceptiongroup import ExceptionGroup  # anyio's backport (a dependency before 3.11)


@contextlib.asynccontextmanager
async def proxied(directory: Path) -> AsyncIterator[Any]:
    """An initialized session with a new stdio proxy (store and upstream log in `directory`)."""
    argv = proxy_argv(
        "--store",
        f"sqlite:///{directory / 'proxy.db'}",
        upstream=upstream_argv(directory / "upstream.log"),
    )
    server = StdioServerParameters(
        command=argv[0], args=argv[1:], env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT)
    )
    with (directory / "proxy.err").open("a") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


def _unknown(error: BaseException) -> OutcomeUnknownError:
    found = outcome_unknown_in(error)
    assert found is not None, repr(error)
    return found


def test_outcome_unknown_is_found_in_nested_groups_and_only_there() -> None:
    unknown = OutcomeUnknownError("lost", key="k")
    grouped = ExceptionGroup("outer", [ExceptionGroup("inner", [ValueError(), unknown])])
    assert outcome_unknown_in(unknown) is unknown
    assert outcome_unknown_in(grouped) is unknown
    assert outcome_unknown_in(ExceptionGroup("g", [ConnectionError()])) is None
    try:
        raise RuntimeError("my own decision") from unknown
    except RuntimeError as own:
        assert outcome_unknown_in(own) is None  # a cause is the code's own business


# -- Temporal's interceptor -------------------------------------------------------------------


async def test_temporal_interceptor_fails_an_unknown_outcome_for_good() -> None:
    pytest.importorskip("temporalio", reason="temporalio is not installed (extra temporal)")
    from temporalio.exceptions import ApplicationError

    from idemtools.integrations.temporal import OUTCOME_UNKNOWN_TYPE, OutcomeUnknownInterceptor

    class Raising:
        def __init__(self, error: BaseException) -> None:
            self.error = error

        async def execute_activity(self, input: Any) -> Any:
            raise self.error

    async def outcome(error: BaseException) -> BaseException:
        inbound = OutcomeUnknownInterceptor().intercept_activity(Raising(error))  # type: ignore[arg-type]
        with pytest.raises(BaseException) as raised:
            await inbound.execute_activity(None)  # type: ignore[arg-type]
        return raised.value

    unknown = OutcomeUnknownError("lost", key="k")
    keyed = ApplicationError("charge: lost", type=OUTCOME_UNKNOWN_TYPE, non_retryable=True)
    for error in (unknown, ExceptionGroup("g", [ExceptionGroup("h", [unknown])])):
        failure = await outcome(error)
        assert isinstance(failure, ApplicationError)
        assert (failure.type, failure.non_retryable) == (OUTCOME_UNKNOWN_TYPE, True)
        assert failure.details == (unknown.data,) and failure.__cause__ is error
    assert await outcome(ExceptionGroup("g", [keyed])) is keyed  # keyed_call's, unchanged
    converted = ApplicationError("lost", unknown.data, type=OUTCOME_UNKNOWN_TYPE)  # retryable
    failure = await outcome(converted)
    assert isinstance(failure, ApplicationError) and failure.non_retryable
    assert (failure.message, failure.details, failure.__cause__) == (
        "lost",
        (unknown.data,),
        converted,
    )
    for other in (ConnectionError("lost"), ExceptionGroup("g", [ValueError()]), keyed):
        assert await outcome(other) is other  # everything else passes as it was


# -- LangGraph --------------------------------------------------------------------------------


@pytest.mark.slow
def test_langgraph_an_unknown_outcome_is_not_retried(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.func", reason="langgraph is not installed")
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.func import entrypoint
    from langgraph.func import task as typed_task
    from langgraph.types import RetryPolicy

    from idemtools.integrations.langgraph import TaskOutcomeUnknownError, keyed_call, retry_on

    # `task(retry_policy=...)` returns a decorator generic in its return type only, which mypy
    # binds to Never (and then refuses any function): used untyped here.
    task: Any = typed_task
    attempts: list[str] = []
    policy: dict[str, Any] = {"max_attempts": 3, "initial_interval": 0.01, "jitter": False}

    # The session opened in the task: its exception groups reach LangGraph, whose default
    # predicate would retry them; `retry_on` does not.
    @task(retry_policy=RetryPolicy(**policy, retry_on=retry_on))
    async def inside() -> Any:
        attempts.append("inside")
        async with proxied(tmp_path) as session:
            return await keyed_call(session, "die", {"label": "inside"})

    # A session opened outside the graph: the error reaches LangGraph bare, and its default
    # predicate leaves it alone (a `RuntimeError`).
    holder: dict[str, Any] = {}

    @task(retry_policy=RetryPolicy(**policy))
    async def outside() -> Any:
        attempts.append("outside")
        return await keyed_call(holder["session"], "die", {"label": "outside"})

    def workflow(step: Any) -> Any:
        @entrypoint(checkpointer=InMemorySaver())
        async def run(_: int) -> Any:
            return await step()

        return run

    config: Any = {"configurable": {"thread_id": "t"}}

    async def main() -> tuple[BaseException, BaseException]:
        with pytest.raises(Exception) as in_task:
            await workflow(inside).ainvoke(1, config, durability="sync")
        async with proxied(tmp_path) as session:
            holder["session"] = session
            try:
                await workflow(outside).ainvoke(1, config, durability="sync")
            except Exception as error:
                bare = error
            else:
                raise AssertionError("the call was answered")
        return in_task.value, bare

    in_task, bare = anyio.run(main)
    assert attempts == ["inside", "outside"], "one attempt each: LangGraph did not retry"
    assert isinstance(_unknown(in_task), TaskOutcomeUnknownError)
    assert isinstance(bare, TaskOutcomeUnknownError) and isinstance(bare, OutcomeUnknownError)
    log = tmp_path / "upstream.log"
    assert (executions(log, "inside"), executions(log, "outside")) == (1, 1)


# -- DBOS -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_dbos_an_unknown_outcome_is_the_step_error_at_once(dbos: Any, tmp_path: Path) -> None:
    from dbos._error import DBOSMaxStepRetriesExceeded

    from idemtools.integrations.dbos import keyed_call, should_retry

    DBOS = dbos
    attempts: list[str] = []

    async def charge(label: str) -> Any:
        attempts.append(label)
        async with proxied(tmp_path) as session:
            return await keyed_call(session, "die", {"label": label})

    retries: dict[str, Any] = {"retries_allowed": True, "max_attempts": 3, "interval_seconds": 0}

    @DBOS.step(**retries, should_retry=should_retry)
    async def charge_once(label: str) -> Any:
        return await charge(label)

    @DBOS.step(**retries)  # no predicate: DBOS retries every exception
    async def charge_retried(label: str) -> Any:
        return await charge(label)

    @DBOS.workflow()
    async def checkout(label: str) -> Any:
        return await (charge_once if label == "once" else charge_retried)(label)

    async def main() -> list[BaseException]:
        errors: list[BaseException] = []
        for label in ("once", "retried"):
            try:
                await checkout(label)
            except Exception as error:
                errors.append(error)
        return errors

    once, retried = anyio.run(main)
    assert attempts == ["once", "retried", "retried", "retried"]
    assert _unknown(once).key is not None, "the step's own error reached the workflow"
    # Without the predicate: three attempts, nothing ran again (the same key each time), and
    # the workflow gets DBOS's wrapper around the three equal answers.
    assert isinstance(retried, DBOSMaxStepRetriesExceeded)
    assert all(outcome_unknown_in(e) is not None for e in retried.errors)
    log = tmp_path / "upstream.log"
    assert (executions(log, "once"), executions(log, "retried")) == (1, 1)
