"""The tasks executions run as (`idemtools.engine.runtime.Workers`).

An execution runs as a task of its own, so that nothing cancelling its caller stops it between
the tool's side effect and its record. On Python 3.11 that task is an idle *worker*, reused by
every call that finishes in its first step; one that suspends is carried on by its worker.
These tests pin what a task of its own means, whichever task it is: the tool never runs as its
caller's task, sees its own copy of the context, and goes on when its caller is cancelled.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.stores.memory import MemoryStore

POLICY = Policy.of(retention=60, lease=30, scope=shared)
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")

needs_workers = pytest.mark.skipif(
    sys.version_info[:2] != (3, 11), reason="3.11 runs executions as workers (3.12: eager tasks)"
)


def call(key: str) -> ToolCall:
    return ToolCall(name="t", arguments={"k": key}, key=key, policy=POLICY)


def engine() -> Engine:
    return Engine(MemoryStore(), registry=Registry())


def test_a_tool_never_runs_as_its_callers_task_and_sees_its_own_context() -> None:
    seen: list[tuple[asyncio.Task[object] | None, str]] = []

    async def tool() -> Outcome:
        seen.append((asyncio.current_task(), VAR.get()))
        VAR.set("set by the tool")
        return Outcome(result={"content": []})

    async def main() -> None:
        e = engine()
        VAR.set("the caller's")
        caller = asyncio.current_task()
        for i in range(3):
            outcome = await e.handle(call(f"k{i}"), tool)
            assert outcome.result == {"content": []}
            assert VAR.get() == "the caller's"  # nothing the tool set leaks back
        await e.aclose()
        assert all(task is not caller and task is not None for task, _ in seen)
        # Each call starts from its caller's context, never from an earlier call's.
        assert [value for _, value in seen] == ["the caller's"] * 3

    asyncio.run(main())


@needs_workers
def test_calls_that_finish_at_once_reuse_one_idle_worker() -> None:
    tasks: list[asyncio.Task[object] | None] = []

    async def tool() -> Outcome:
        tasks.append(asyncio.current_task())
        return Outcome(result={})

    async def main() -> None:
        e = engine()
        for i in range(5):
            await e.handle(call(f"k{i}"), tool)
        assert len(set(map(id, tasks))) == 1  # one worker, never woken
        (worker,) = set(tasks)
        assert worker is not None and not worker.done()
        assert not e._background  # idle workers are not background work
        await e.aclose()

    asyncio.run(main())


@needs_workers
def test_a_call_that_suspends_goes_on_in_its_worker_and_the_next_call_takes_another() -> None:
    release = asyncio.Event()
    steps: list[tuple[str, asyncio.Task[object] | None, str]] = []

    async def slow() -> Outcome:
        VAR.set("slow")
        steps.append(("before", asyncio.current_task(), VAR.get()))
        await release.wait()
        steps.append(("after", asyncio.current_task(), VAR.get()))
        return Outcome(result={"slow": True})

    async def fast() -> Outcome:
        steps.append(("fast", asyncio.current_task(), VAR.get()))
        return Outcome(result={})

    async def main() -> None:
        e = engine()
        waiting = asyncio.ensure_future(e.handle(call("slow"), slow))
        await asyncio.sleep(0)
        assert len(e._background) == 1  # the busy worker
        await e.handle(call("fast"), fast)
        release.set()
        assert (await waiting).result == {"slow": True}
        await asyncio.sleep(0)
        assert not e._background
        await e.aclose()

    asyncio.run(main())
    (_, before, v1), (_, fast_task, v2), (_, after, v3) = steps
    assert before is after  # carried on by the very task it started as
    assert fast_task is not before  # the busy worker was not handed the next call
    assert (v1, v2, v3) == ("slow", "unset", "slow")  # its context went on with it


def test_a_cancelled_caller_does_not_stop_its_execution() -> None:
    store = MemoryStore()
    done = asyncio.Event()

    async def tool() -> Outcome:
        await asyncio.sleep(0.05)
        done.set()
        return Outcome(result={"ran": True})

    async def main() -> Outcome:
        e = Engine(store, registry=Registry())
        caller = asyncio.ensure_future(e.handle(call("c"), tool))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.wait_for(done.wait(), 5)
        replay = await e.handle(call("c"), tool)
        await e.aclose()
        return replay

    replay = asyncio.run(main())
    assert replay.replayed and replay.result == {"ran": True}


def test_idle_workers_end_quietly_with_their_loop(caplog: pytest.LogCaptureFixture) -> None:
    async def tool() -> Outcome:
        return Outcome(result={})

    async def served() -> None:
        e = engine()
        for i in range(3):
            await e.handle(call(f"k{i}"), tool)

    caplog.set_level(logging.DEBUG, logger="asyncio")
    anyio.run(served)  # cancels what is left, idle workers included
    # A loop closed without cancelling its tasks leaves an idle worker to the collector.
    loop = asyncio.new_event_loop()
    loop.run_until_complete(served())
    loop.close()
    del loop
    gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


@needs_workers
def test_an_interrupt_out_of_a_suspended_execution_reaches_the_loop_and_logs_nothing_else(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def tool() -> Outcome:
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    async def main() -> None:
        await engine().handle(call("i"), tool)

    caplog.set_level(logging.DEBUG, logger="asyncio")
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(main())
    gc.collect()
    assert "never retrieved" not in caplog.text
