"""`idemtools.server.shutdown`: what the end of serving and SIGTERM/SIGINT do, in-process.
The real processes (stdio EOF, signals, a second Ctrl-C, uvicorn) are in
tests/e2e/test_boundaries.py; here, the pieces: where handlers are installed and restored,
chaining, and the ASGI lifespan wait, against a real SQLiteStore.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette

from idemtools import Engine, Installation, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.server.installation import install
from idemtools.server.shutdown import SHUTDOWN_SIGNALS, hook_app_lifespan
from idemtools.stores.base import Status
from idemtools.stores.sqlite import SQLiteStore

POLICY = Policy.of(retention=60, lease=30, scope=shared)


def _installation(tmp_path: Path) -> Installation:
    async def no_tools() -> list[tuple[str, Policy | None, dict[str, Any] | None]]:
        return []

    engine = Engine(SQLiteStore(str(tmp_path / "records.db")), registry=Registry())
    return Installation(server=None, engine=engine, adapter="test", _list_tools=no_tools)


def _call(key: str) -> ToolCall:
    return ToolCall(name="work", arguments={"n": 1}, key=key, policy=POLICY)


class Tool:
    def __init__(self, seconds: float) -> None:
        self.seconds, self.runs = seconds, 0
        self.started = anyio.Event()

    async def __call__(self) -> Outcome:
        self.runs += 1
        self.started.set()
        await anyio.sleep(self.seconds)
        return Outcome(result={"content": [{"type": "text", "text": "ran"}], "isError": False})


@pytest.fixture
def handlers() -> Iterator[None]:
    """Leave the process's SIGTERM/SIGINT handlers as the test found them."""
    saved = {sig: signal.getsignal(sig) for sig in SHUTDOWN_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


async def _record(inst: Installation, key: str) -> Any:
    from idemtools.engine.decision import scope_hash
    from idemtools.scopes import CallContext

    store = SQLiteStore(inst.engine.store.path)  # type: ignore[attr-defined]
    try:
        return await store.get(scope_hash(POLICY, CallContext(), key), key)
    finally:
        await store.aclose()


async def test_handlers_are_installed_while_serving_and_restored_after(
    tmp_path: Path, handlers: None
) -> None:
    def mine(sig: int, frame: Any) -> None: ...

    signal.signal(signal.SIGTERM, mine)
    inst = _installation(tmp_path)
    async with inst.serving():
        assert signal.getsignal(signal.SIGTERM) is not mine
        async with inst.serving():  # nested (a runner around an app lifespan): still one
            pass
        assert signal.getsignal(signal.SIGTERM) is not mine
    assert signal.getsignal(signal.SIGTERM) is mine


async def test_an_ignored_signal_stays_ignored(tmp_path: Path, handlers: None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    async with _installation(tmp_path).serving():
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN


def test_no_handlers_from_outside_the_main_thread(tmp_path: Path, handlers: None) -> None:
    before = {sig: signal.getsignal(sig) for sig in SHUTDOWN_SIGNALS}
    seen: dict[int, Any] = {}

    async def serve() -> None:
        async with _installation(tmp_path).serving():
            seen.update({sig: signal.getsignal(sig) for sig in SHUTDOWN_SIGNALS})

    thread = threading.Thread(target=asyncio.run, args=(serve(),))
    thread.start()
    thread.join(10)
    assert seen == before


async def test_sigterm_chains_at_once_refuses_new_calls_and_records_the_running_one(
    tmp_path: Path, handlers: None
) -> None:
    called: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, frame: called.append(sig))
    inst = _installation(tmp_path)
    tool = Tool(0.5)
    async with inst.serving():
        running = asyncio.ensure_future(inst.engine.handle(_call("k-run"), tool))
        await tool.started.wait()
        os.kill(os.getpid(), signal.SIGTERM)
        await anyio.sleep(0.05)
        assert called == [signal.SIGTERM]  # the handler already there ran, at once
        assert not running.done()
        refused = await inst.engine.handle(_call("k-new"), Tool(0))
        assert refused.error is not None and refused.error["data"]["type"] == (
            "idempotency_store_unavailable"
        )
        outcome = await running
    assert outcome.result is not None and tool.runs == 1
    record = await _record(inst, "k-run")
    assert record is not None and record.status is Status.COMPLETED


async def test_the_end_of_serving_waits_for_the_call_in_flight(tmp_path: Path) -> None:
    inst = _installation(tmp_path)
    tool = Tool(0.4)
    async with inst.serving():
        caller = asyncio.ensure_future(inst.engine.handle(_call("k-end"), tool))
        await tool.started.wait()
        caller.cancel()  # the transport ended: the SDK cancels its request handlers
    # serving() returned only after the call was recorded
    record = await _record(inst, "k-end")
    assert record is not None and record.status is Status.COMPLETED


async def test_an_asgi_lifespan_waits_inside_the_apps_own_lifespan(tmp_path: Path) -> None:
    inst = _installation(tmp_path)
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def app_lifespan(app: Starlette) -> AsyncIterator[None]:
        events.append("app up")
        yield
        events.append(f"app down, executing={inst.engine.executing}")

    app = Starlette(lifespan=app_lifespan)
    assert hook_app_lifespan(inst, app)
    assert not hook_app_lifespan(inst, app)  # once
    tool = Tool(0.4)
    async with app.router.lifespan_context(app):
        caller = asyncio.ensure_future(inst.engine.handle(_call("k-asgi"), tool))
        await tool.started.wait()
        caller.cancel()
    # The app's own lifespan ended after the call: its resources were there while it ran.
    assert events == ["app up", "app down, executing=0"]
    record = await _record(inst, "k-asgi")
    assert record is not None and record.status is Status.COMPLETED


@pytest.mark.parametrize("grace", [-1, float("inf"), float("nan"), True, "5"])
def test_shutdown_grace_is_checked(grace: object) -> None:
    from mcp.server.lowlevel import Server

    with pytest.raises(ValueError, match="shutdown_grace"):
        install(Server("x"), shutdown_grace=grace)  # type: ignore[arg-type]


def test_shutdown_grace_is_kept(tmp_path: Path) -> None:
    from mcp.server.lowlevel import Server

    assert install(Server("x"), shutdown_grace=2).shutdown_grace == 2.0
    assert install(Server("y")).shutdown_grace is None
