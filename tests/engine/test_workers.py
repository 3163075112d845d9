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

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.stores.memory import MemoryStore

POLICY = Policy.of(retention=60, lease=30, scope=shared)
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


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
