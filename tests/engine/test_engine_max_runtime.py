"""`max_runtime`: a hung tool does not hold its key for ever, and never runs twice.

Past the policy's `max_runtime` the lease keeper records `idempotency_outcome_unknown` under
the running call's owner, with an ERROR naming the key digest and the tool: a retry gets that
answer, on the same engine while the first run is still going, and the tool is not entered a
second time. When the tool does end, its real outcome replaces the unknown record, and
retries from then on replay it. Real time, a real store (MemoryStore, which the lease keeper
renews directly, and Redis), asyncio and trio.
"""

from __future__ import annotations

import importlib.util
import logging
import time
import uuid
from collections.abc import Callable

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall, key_digest
from idemtools.stores import MemoryStore
from idemtools.stores.base import Store

from ..services import RUN_ID, need_redis

LEASE = 0.3  # renewed every 0.1 s

BACKENDS = [
    pytest.param("asyncio"),
    pytest.param(
        "trio",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("trio") is None, reason="trio is not installed"
        ),
    ),
]


class Hung:
    """The first run hangs until released (a deadlock, a client that has gone); later runs
    return at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self) -> Outcome:
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            await self.release.wait()
        return Outcome(result={"content": [{"type": "text", "text": f"run {self.calls}"}]})


def _call(policy: Policy) -> ToolCall:
    return ToolCall(name="export", arguments={}, key="k-hung", policy=policy)


async def _scenario(  # type: ignore[no-untyped-def]
    store: Store, max_runtime: float | None, caplog: pytest.LogCaptureFixture
):
    policy = Policy.of(retention=60, lease=LEASE, scope=shared, max_runtime=max_runtime)
    engine = Engine(store, registry=Registry())
    tool = Hung()
    retry: Outcome | None = None
    with caplog.at_level(logging.ERROR, logger="idemtools"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine.handle, _call(policy), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
            try:
                with anyio.fail_after(5):
                    await tool.started.wait()
                began = time.monotonic()
                # Well past max_runtime plus one lease, and several renewal intervals.
                await anyio.sleep((max_runtime or 0.5) + 3 * LEASE)
                with anyio.fail_after(5):
                    retry = await engine.handle(_call(policy), tool)
                waited = time.monotonic() - began
            finally:
                tool.release.set()
        # The first run has ended and recorded its own outcome: what retries get now.
        after = await engine.handle(_call(policy), tool)
    await engine.aclose()
    return retry, tool, waited, after


def _unknown(outcome: Outcome | None) -> bool:
    return (
        outcome is not None
        and outcome.error is not None
        and outcome.error["data"]["type"] == "idempotency_outcome_unknown"
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_past_max_runtime_the_outcome_is_unknown_and_the_tool_never_runs_twice(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        retry, tool, _, after = await _scenario(MemoryStore(), 0.5, caplog)
        # The hung call is still running: the retry is told the outcome is unknown.
        assert _unknown(retry), retry
        assert tool.calls == 1
        # It ended: its own outcome replaced the unknown record.
        assert after.error is None and after.replayed, after
        assert after.result is not None and after.result["content"][0]["text"] == "run 1"

    anyio.run(main, backend=backend)
    (line,) = [r.getMessage() for r in caplog.records if "max_runtime" in r.getMessage()]
    assert "tool=export" in line and f"key_digest={key_digest('k-hung')}" in line
    assert all(r.levelno == logging.ERROR for r in caplog.records if "max_runtime" in r.msg)


def test_without_max_runtime_the_claim_is_renewed(caplog: pytest.LogCaptureFixture) -> None:
    # The control: the same scenario with max_runtime=None keeps the key in progress.
    async def main() -> None:
        retry, tool, _, after = await _scenario(MemoryStore(), None, caplog)
        assert retry is not None and retry.error is not None
        assert retry.error["data"]["type"] == "idempotency_key_in_progress"
        assert tool.calls == 1 and after.replayed

    anyio.run(main)
    assert not [r for r in caplog.records if "max_runtime" in r.getMessage()]


@pytest.mark.services
async def test_max_runtime_on_redis(caplog: pytest.LogCaptureFixture) -> None:
    from idemtools.stores.redis import RedisStore

    prefix = f"idemtools-test:{RUN_ID}:maxrt:{uuid.uuid4().hex[:6]}:"
    make: Callable[[], RedisStore] = lambda: RedisStore.from_url(need_redis(), prefix=prefix)  # noqa: E731
    retry, tool, _, after = await _scenario(make(), 0.5, caplog)
    assert _unknown(retry) and tool.calls == 1, retry
    assert after.replayed and after.result is not None, after
    assert after.result["content"][0]["text"] == "run 1"
    assert [r for r in caplog.records if "max_runtime" in r.getMessage()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_runtime_with_a_store_of_the_five_operations_alone(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A custom store bound to the server's loop, without `for_lease_keeper` (renewed on that
    # loop: asyncio's, or trio's through its token): the unknown outcome is written there too.
    # It has no `replaceable` either, so the unknown record is final: the tool's own outcome,
    # when it ends, does not replace it.
    from .test_lease_keeper_custom_store import LoopBound

    store = LoopBound()

    async def main() -> None:
        retry, tool, _, after = await _scenario(store, 0.5, caplog)
        assert _unknown(retry), retry
        assert tool.calls == 1
        assert _unknown(after) and after.replayed and tool.calls == 1, after

    anyio.run(main, backend=backend)
    assert store.refused == 0, "every operation ran on the server's loop"
    (line,) = [r.getMessage() for r in caplog.records if "max_runtime" in r.getMessage()]
    assert "tool=export" in line
