"""A tool that raises a `BaseException` that is not its caller's cancellation.

An `asyncio.CancelledError` out of a future another task cancelled, or a custom `BaseException`
subclass, is the call's outcome: recorded as an error, replayed to retries. An `except Exception`
would let it escape `_run`: nothing recorded or released, the key `in_progress` for the whole
lease while nothing ran, then the retry running the side effect again.
`KeyboardInterrupt` / `SystemExit` are recorded, then re-raised. The cancellation of the
execution's own task (an event loop tearing down) still propagates and records nothing.

Real SQLite files, so a record written by one event loop (one "process") is read by the next.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.engine.decision import scope_hash
from idemtools.scopes import CallContext
from idemtools.stores.base import Status
from idemtools.stores.sqlite import SQLiteStore

POLICY = Policy.of(retention=60, lease=30, scope=shared)  # a long lease: a stuck key would show
CALL = ToolCall(name="charge", arguments={"amount": 1}, key="k", policy=POLICY)

BACKENDS = [
    pytest.param("asyncio"),
    pytest.param(
        "trio",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("trio") is None, reason="trio is not installed"
        ),
    ),
]


class Custom(BaseException):
    """What a library might raise to unwind (gevent's GreenletExit, a framework's abort)."""


class Tool:
    """Counts its runs; raises `raise_` after suspending once (or at once with `eager`)."""

    def __init__(self, make: Callable[[], Awaitable[BaseException]], *, eager: bool = False):
        self.make = make
        self.eager = eager
        self.calls = 0

    async def __call__(self) -> Outcome:
        self.calls += 1
        if not self.eager:
            await anyio.sleep(0.01)  # the side effect is on its way
        raise await self.make()


async def _cancelled_future() -> BaseException:
    # The tool awaits a future that another task cancels: asyncio.CancelledError in the tool,
    # while nobody cancelled the execution itself.
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.cancel)
    try:
        await future
    except asyncio.CancelledError as exc:
        return exc
    raise AssertionError("the future was not cancelled")


async def _custom() -> BaseException:
    return Custom("unwinding")


async def _interrupt() -> BaseException:
    return KeyboardInterrupt()


async def _exit() -> BaseException:
    return SystemExit(3)


async def _record(path: Path) -> tuple[Status | None, bytes | None]:
    store = SQLiteStore(path)
    try:
        record = await store.get(scope_hash(POLICY, CallContext(), "k"), "k")
    finally:
        await store.aclose()
    if record is None:
        return None, None
    return record.status, record.outcome


def _is_recorded_error(outcome: Outcome, name: str) -> None:
    assert outcome.error is not None, outcome
    assert name in outcome.error["message"]


def _once_then_replayed(path: Path, tool: Tool, backend: str, name: str) -> None:
    async def first() -> Outcome:
        engine = Engine(SQLiteStore(path), registry=Registry())
        try:
            return await engine.handle(CALL, tool)
        finally:
            await engine.aclose()

    async def retry() -> Outcome:
        engine = Engine(SQLiteStore(path), registry=Registry())
        try:
            return await engine.handle(CALL, tool)
        finally:
            await engine.aclose()

    outcome = anyio.run(first, backend=backend)
    _is_recorded_error(outcome, name)
    status, _ = anyio.run(_record, path)
    assert status is Status.COMPLETED, "the outcome was recorded, not left in progress"
    again = anyio.run(retry, backend=backend)
    assert again.replayed and again.error == outcome.error
    assert tool.calls == 1


@pytest.mark.parametrize("eager", [False, True], ids=["suspended", "first-step"])
def test_cancelled_error_from_a_future_is_the_tools_outcome(tmp_path: Path, eager: bool) -> None:
    if sys.version_info < (3, 11):
        pytest.skip("3.10 has no Task.cancelling(): its CancelledError counts as cancellation")
    tool = Tool(_cancelled_future, eager=eager)
    _once_then_replayed(tmp_path / "f.sqlite", tool, "asyncio", "CancelledError")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("eager", [False, True], ids=["suspended", "first-step"])
def test_a_custom_base_exception_is_recorded_and_replayed(
    tmp_path: Path, backend: str, eager: bool
) -> None:
    tool = Tool(_custom, eager=eager)
    _once_then_replayed(tmp_path / "c.sqlite", tool, backend, "Custom")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make", [_interrupt, _exit], ids=["KeyboardInterrupt", "SystemExit"])
def test_interrupts_are_recorded_then_re_raised(
    tmp_path: Path, backend: str, make: Callable[[], Awaitable[BaseException]]
) -> None:
    path = tmp_path / "i.sqlite"
    tool = Tool(make)
    expected = type(anyio.run(make, backend="asyncio")) if make is _exit else KeyboardInterrupt

    async def first() -> None:
        engine = Engine(SQLiteStore(path), registry=Registry())
        await engine.handle(CALL, tool)

    with pytest.raises(expected):
        anyio.run(first, backend=backend)
    status, _ = anyio.run(_record, path)
    assert status is Status.COMPLETED, "recorded before it was re-raised"

    async def retry() -> Outcome:
        engine = Engine(SQLiteStore(path), registry=Registry())
        try:
            return await engine.handle(CALL, tool)
        finally:
            await engine.aclose()

    again = anyio.run(retry, backend=backend)
    _is_recorded_error(again, expected.__name__)
    assert again.replayed and tool.calls == 1


def test_cancelling_the_execution_task_itself_still_propagates(tmp_path: Path) -> None:
    # The event loop tearing down cancels the execution's own task: that is no outcome of the
    # tool's; nothing is recorded (the claim lapses by lease, the SEP's crash limit).
    path = tmp_path / "t.sqlite"
    started = asyncio.Event()

    async def tool() -> Outcome:
        started.set()
        await asyncio.sleep(30)
        raise AssertionError("not reached")

    async def main() -> None:
        engine = Engine(SQLiteStore(path), registry=Registry())
        caller = asyncio.ensure_future(engine.handle(CALL, tool))
        await started.wait()
        (execution,) = [t for t in engine._background if not t.done()]
        execution.cancel()
        with pytest.raises(asyncio.CancelledError):
            await execution
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller

    asyncio.run(main())
    status, _ = anyio.run(_record, path)
    assert status is Status.IN_PROGRESS


@pytest.mark.sdk
def test_through_the_sdk_a_cancelled_future_is_replayed_not_rerun() -> None:
    # The same path through a real mcp 2.x server (in-memory transport) and the client helper.
    from idemtools.server.adapters import SDK2

    if not SDK2 or sys.version_info < (3, 11):
        pytest.skip("mcp 2.x in-memory Client, Python 3.11+")
    # mcp 2.x only (skipped above on 1.x)
    from mcp.client import Client  # type: ignore[attr-defined]
    from mcp.server.mcpserver import MCPServer  # type: ignore[import-not-found]

    import idemtools
    from idemtools.client import call_tool

    runs = 0

    async def main() -> list[str]:
        server = MCPServer("t")

        @server.tool()
        async def boom(x: int) -> int:
            nonlocal runs
            runs += 1
            if x:
                raise await _cancelled_future()
            return x

        idemtools.install(server)
        seen: list[str] = []
        async with Client(server, mode="legacy") as client:
            for _ in range(2):
                with pytest.raises(Exception) as caught:
                    await call_tool(client.session, "boom", {"x": 1}, idempotency_key="kk")
                seen.append(str(caught.value))
        return seen

    first, retry = anyio.run(main)
    assert "CancelledError" in first and retry == first
    assert runs == 1
