"""Claims caught by cancellation, and shutdown that drains.

* A caller cancelled while its claim is on its way to the store must not leave the key "in
  progress" for a whole lease while nothing runs: the claim is shielded and then released (anyio
  cancellation, how the SDKs cancel), or released in the background (a native asyncio
  `task.cancel()`). Tested against a real Redis behind a TCP relay that delays every request.
* `Engine.aclose()` / `Installation.aclose()` let running keyed calls finish and be recorded
  before the store is closed, refuse new keyed calls meanwhile, and say so when the grace
  period runs out.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
import uuid
from pathlib import Path

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.engine.decision import scope_hash
from idemtools.scopes import CallContext
from idemtools.stores.base import Status
from idemtools.stores.redis import RedisStore
from idemtools.stores.sqlite import SQLiteStore

from ..services import RUN_ID, need_redis, private_redis, proxy_to, with_port

DELAY = 0.4  # each request to Redis waits this long in the relay
POLICY = Policy.of(retention=60, lease=30, scope=shared)  # a long lease: a stuck key would show


def ok(text: str) -> Outcome:
    return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False})


class Tool:
    """Counts its runs; with `gated`, each run waits until `gate` is set (no timing guesses)."""

    def __init__(self, seconds: float = 0.0, *, gated: bool = False) -> None:
        self.calls = 0
        self.seconds = seconds
        self.started = anyio.Event()
        self.gate = anyio.Event() if gated else None

    async def __call__(self) -> Outcome:
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        await anyio.sleep(self.seconds)
        return ok(f"run {self.calls}")


def call(key: str) -> ToolCall:
    return ToolCall(name="charge", arguments={"amount": 1}, key=key, policy=POLICY)


async def _slow_redis_engine(
    proxy_port: int, url: str | None = None
) -> tuple[Engine, RedisStore, RedisStore]:
    url = url or need_redis()
    prefix = f"idemtools-test:{RUN_ID}:cancel:{uuid.uuid4().hex[:6]}:"
    slow = RedisStore.from_url(with_port(url, "127.0.0.1", proxy_port), prefix=prefix)
    direct = RedisStore.from_url(url, prefix=prefix)  # to look at the record without delay
    engine = Engine(slow, registry=Registry())
    engine.release_retry_delay = 0.2
    # Connect and load the scripts first, so the cancellation below catches the claim itself in
    # the relay, not redis-py's handshake nor an EVALSHA answered NOSCRIPT (which never lands).
    await slow.get("warm-up", "warm-up")
    assert (await slow.claim("warm-up", "warm-up", "f", "o", 5)).claimed
    assert await slow.release("warm-up", "warm-up", "o")
    return engine, slow, direct


async def _scope_of(engine: Engine) -> str:
    from idemtools.engine.decision import scope_hash
    from idemtools.scopes import CallContext

    return scope_hash(POLICY, CallContext(), "k")


async def _settles_free(direct: RedisStore, scope: str, key: str, within: float) -> None:
    await anyio.sleep(2 * DELAY)  # long enough for a claim still in the relay to have landed
    deadline = time.monotonic() + within
    while True:
        record = await direct.get(scope, key)
        if record is None:
            return
        assert record.status is Status.IN_PROGRESS
        assert time.monotonic() < deadline, "the key stayed in progress while nothing ran"
        await anyio.sleep(0.05)


@pytest.mark.services
async def test_anyio_cancel_during_claim_releases_the_key() -> None:
    async with proxy_to(need_redis(), 6379) as proxy:
        engine, slow, direct = await _slow_redis_engine(proxy.port)
        proxy.delay = DELAY
        tool = Tool()
        results: list[Outcome] = []

        async def caller() -> None:
            results.append(await engine.handle(call("k"), tool))

        sent = proxy.received
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await proxy.wait_received(sent + 1)  # the claim is in the relay now
            tg.cancel_scope.cancel()
        assert results == [] and tool.calls == 0
        scope = await _scope_of(engine)
        await _settles_free(direct, scope, "k", within=4 * DELAY)
        # The store may show the key free a moment before the releasing task reads the answer.
        deadline = time.monotonic() + 2
        while engine.stats.released == 0 and time.monotonic() < deadline:
            await anyio.sleep(0.01)
        assert engine.stats.released == 1
        # The retry is not told "in progress" for a lease: it runs, once.
        proxy.delay = 0
        assert await engine.handle(call("k"), tool) == ok("run 1")
        assert await engine.handle(call("k"), tool) == ok("run 1")
        assert tool.calls == 1
        await slow.aclose()
        await direct.aclose()


@pytest.mark.services
async def test_native_task_cancel_during_claim_releases_the_key() -> None:
    async with proxy_to(need_redis(), 6379) as proxy:
        engine, slow, direct = await _slow_redis_engine(proxy.port)
        proxy.delay = DELAY
        tool = Tool()
        sent = proxy.received
        task: asyncio.Task[Outcome] = asyncio.get_running_loop().create_task(
            engine.handle(call("k"), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        )
        await proxy.wait_received(sent + 1)  # the claim is in the relay now
        task.cancel()  # goes through any anyio shield
        with pytest.raises(asyncio.CancelledError):
            await task
        assert tool.calls == 0
        scope = await _scope_of(engine)
        # The claim may land after the first release: the second one, a moment later, frees it.
        await _settles_free(direct, scope, "k", within=6 * DELAY + 1)
        proxy.delay = 0
        assert await engine.handle(call("k"), tool) == ok("run 1")
        assert tool.calls == 1
        await slow.aclose()
        await direct.aclose()


# -- shutdown -----------------------------------------------------------------------------


async def test_aclose_drains_running_calls_before_closing_the_store(tmp_path: Path) -> None:
    path = tmp_path / "drain.sqlite"
    engine = Engine(SQLiteStore(path), registry=Registry())
    tool = Tool(gated=True)
    results: list[Outcome] = []

    async def caller() -> None:
        results.append(await engine.handle(call("k"), tool))

    async with anyio.create_task_group() as tg:
        tg.start_soon(caller)
        with anyio.fail_after(10):
            await tool.started.wait()
        assert engine.executing == 1
        closing = anyio.Event()

        async def close() -> None:
            await engine.aclose()
            closing.set()

        tg.start_soon(close)
        with anyio.fail_after(10):
            while not engine._closing:
                await anyio.sleep(0.01)
        # A new keyed call during the drain is refused, not run.
        refused = await engine.handle(call("other"), tool)
        assert refused.error is not None
        assert refused.error["data"]["type"] == "idempotency_store_unavailable"
        assert "shutting down" in refused.error["message"]
        assert not closing.is_set(), "the drain waits for the running call"
        tool.gate.set()  # type: ignore[union-attr]
    assert results == [ok("run 1")] and tool.calls == 1
    reopened = SQLiteStore(path)
    scope = await _scope_of(engine)
    record = await reopened.get(scope, "k")
    assert record is not None and record.status is Status.COMPLETED, "recorded before close"
    await reopened.aclose()


async def test_aclose_gives_up_after_the_grace_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine(SQLiteStore(tmp_path / "grace.sqlite"), registry=Registry())
    tool = Tool(gated=True)
    with caplog.at_level(logging.ERROR, logger="idemtools"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.handle, call("k"), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
            with anyio.fail_after(10):
                await tool.started.wait()
            started = time.monotonic()
            drained = await engine.drain(grace=0.2)
            assert drained is False
            assert time.monotonic() - started < 5, "gave up after the grace, not the call"
            tool.gate.set()  # type: ignore[union-attr]
    assert any("still running" in r.getMessage() for r in caplog.records)
    await engine.aclose(grace=0)


async def test_aclose_with_nothing_running_is_immediate(tmp_path: Path) -> None:
    engine = Engine(SQLiteStore(tmp_path / "idle.sqlite"), registry=Registry())
    assert await engine.handle(call("k"), Tool()) == ok("run 1")
    started = time.monotonic()
    await engine.aclose()
    assert time.monotonic() - started < 1.0
    assert engine.keeper.live == 0


# -- a claim in flight counts; the grace keeps leases alive ------------------


@pytest.mark.services
async def test_aclose_waits_for_a_claim_in_flight_and_releases_it() -> None:
    # A claim is on its way to the store (a slow relay in front of a private Redis) when
    # closing begins: `aclose()` waits for its answer, which says "claimed"; that claim is
    # released (fenced by owner) and the call refused, never run; only then is the store closed.
    with private_redis() as url:
        async with proxy_to(url, 6379) as proxy:
            engine, _slow, direct = await _slow_redis_engine(proxy.port, url=url)
            tool = Tool()
            results: list[Outcome] = []
            order: list[str] = []

            async def caller() -> None:
                results.append(await engine.handle(call("k"), tool))
                order.append("answered")

            async def close() -> None:
                await engine.aclose()
                order.append("closed")

            proxy.delay = DELAY
            sent = proxy.received
            async with anyio.create_task_group() as tg:
                tg.start_soon(caller)
                await proxy.wait_received(sent + 1)  # the claim is in the relay now
                assert engine.executing == 1, "a claim in flight counts as in flight"
                tg.start_soon(close)
            assert tool.calls == 0, "a claim answered after closing began never runs"
            (refused,) = results
            assert refused.error is not None
            assert refused.error["data"]["type"] == "idempotency_store_unavailable"
            assert "shutting down" in refused.error["message"]
            assert order == ["answered", "closed"], "the store closed after the claim's answer"
            record = await direct.get(await _scope_of(engine), "k")
            assert record is None, "the claim was released, not left in progress"
            assert engine.stats.released == 1
            await direct.aclose()


@pytest.mark.services
async def test_rolling_restart_past_the_grace_runs_the_tool_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Two instances on one Redis. The old one closes with a keyed call running past its grace:
    # `aclose(grace=)` returns, the call's lease stays renewed, so the new instance's retry is
    # refused in_progress (not run a second time) after the lease would have lapsed, and gets
    # the replay once the old instance has recorded the outcome; then the old one closes.
    url = need_redis()
    prefix = f"idemtools-test:{RUN_ID}:rolling:{uuid.uuid4().hex[:6]}:"
    lease = 0.9
    policy = Policy.of(retention=60, lease=lease, scope=shared)
    keyed = ToolCall(name="charge", arguments={"amount": 1}, key="k", policy=policy)
    old = Engine(RedisStore.from_url(url, prefix=prefix), registry=Registry())
    new = Engine(RedisStore.from_url(url, prefix=prefix), registry=Registry())
    tool = Tool(gated=True)
    results: list[Outcome] = []

    async def first() -> None:
        results.append(await old.handle(keyed, tool))

    with caplog.at_level(logging.ERROR, logger="idemtools"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            try:
                with anyio.fail_after(10):
                    await tool.started.wait()
                began = time.monotonic()
                with anyio.fail_after(5):
                    await old.aclose(grace=0.2)  # returns after the grace, the call running
                assert tool.calls == 1 and results == []
                await anyio.sleep(max(0.0, began + 2 * lease - time.monotonic()))
                with anyio.move_on_after(2):  # a second run would wait on the gate
                    busy = await new.handle(keyed, tool)
                assert tool.calls == 1, "the new instance ran the tool a second time"
                assert busy.error is not None
                assert busy.error["data"]["type"] == "idempotency_key_in_progress"
                assert not old._closed, "the store stays open for the running call"
            finally:
                tool.gate.set()  # type: ignore[union-attr]
    assert results == [ok("run 1")]
    replay = await new.handle(keyed, tool)
    assert replay.replayed and replay.result == ok("run 1").result
    assert tool.calls == 1
    with anyio.fail_after(10):
        while not old._closed:
            await anyio.sleep(0.01)
    (line,) = [r.getMessage() for r in caplog.records if "still running" in r.getMessage()]
    assert "tool=charge" in line and "key_digest=" in line and "running_for=" in line
    await new.aclose()


@pytest.mark.parametrize(
    "backend",
    [
        "asyncio",
        pytest.param(
            "trio",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("trio") is None, reason="trio is not installed"
            ),
        ),
    ],
)
def test_past_the_grace_the_last_call_out_records_and_closes(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "late.sqlite"

    async def main() -> None:
        engine = Engine(SQLiteStore(path), registry=Registry())
        tool = Tool(gated=True)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.handle, call("k"), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
            with anyio.fail_after(10):
                await tool.started.wait()
            with anyio.fail_after(5):
                await engine.aclose(grace=0.1)
            assert engine.executing == 1 and not engine._closed
            tool.gate.set()  # type: ignore[union-attr]
        with anyio.fail_after(10):
            while not engine._closed:
                await anyio.sleep(0.01)
        assert engine.keeper.live == 0

    anyio.run(main, backend=backend)

    async def read() -> None:
        store = SQLiteStore(path)
        record = await store.get(scope_hash(POLICY, CallContext(), "k"), "k")
        await store.aclose()
        assert record is not None and record.status is Status.COMPLETED, "recorded, then closed"

    anyio.run(read)
