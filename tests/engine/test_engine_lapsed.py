"""A retry that finds a lapsed claim does what the tool's `on_lapse` says, and nothing else.

The first execution stops renewing inside the tool (its engine's lease keeper is closed: what
a dead process looks like to the store), its lease runs out, and a second engine on the same
MemoryStore gets the retry:

- `rerun`: the tool runs once more, logged at ERROR with the key digest and how long the claim
  had been held, and counted;
- `refuse`: `idempotency_outcome_unknown` is recorded and answered; the tool never runs again;
- a reconcile: its outcome is recorded and replayed, None runs the tool once, one that raises
  or times out is answered unknown unrecorded and the next retry reconciles again; a retry
  while it reconciles is told `idempotency_key_in_progress`;
- a retry with other arguments is a conflict, and takes nothing over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall, key_digest
from idemtools.engine.decision import scope_hash
from idemtools.policy import LapsedCall
from idemtools.scopes import CallContext
from idemtools.stores import MemoryStore
from idemtools.stores.base import Status

pytestmark = pytest.mark.anyio

LEASE = 0.3
KEY = "k-lapsed"


class Tool:
    """Counts its runs; the first one hangs (the process that will "die" inside it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.started = anyio.Event()
        self.forever = anyio.Event()

    async def __call__(self) -> Outcome:
        self.calls += 1
        if self.calls == 1:
            self.started.set()
            await self.forever.wait()
        return Outcome.of_value(f"charged, run {self.calls}")


def _call(policy: Policy, amount: int = 5) -> ToolCall:
    return ToolCall(name="charge", arguments={"amount": amount}, key=KEY, policy=policy)


def _type(outcome: Outcome) -> str | None:
    return None if outcome.error is None else outcome.error["data"]["type"]


@asynccontextmanager
async def _lapsed(policy: Policy, tool: Tool) -> AsyncIterator[Engine]:
    """A store holding a lapsed claim of `_call(policy)`; yields the retrying engine."""
    store = MemoryStore()
    dead = Engine(store, registry=Registry())
    async with anyio.create_task_group() as tg:
        tg.start_soon(dead.handle, _call(policy), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        with anyio.fail_after(5):
            await tool.started.wait()
        dead.keeper.close()  # no more renewals: to the store, the process has died
        await anyio.sleep(LEASE * 2)
        retrying = Engine(store, registry=Registry())
        try:
            yield retrying
        finally:
            await retrying.aclose()
            tg.cancel_scope.cancel()


def _scope_of(policy: Policy) -> str:
    return scope_hash(policy, CallContext(), KEY)


def _policy(on_lapse: Any, **options: Any) -> Policy:
    return Policy.of(retention=60, lease=LEASE, scope=shared, on_lapse=on_lapse, **options)


async def test_rerun_runs_it_again_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    tool = Tool()
    policy = _policy("rerun")
    with caplog.at_level(logging.ERROR, logger="idemtools"):
        async with _lapsed(policy, tool) as engine:
            retry = await engine.handle(_call(policy), tool)
            assert retry.error is None and tool.calls == 2, retry
            assert engine.stats.lapsed_claims == engine.stats.lapsed_reruns == 1
            assert engine.stats.executions == 1
    (line,) = [r.getMessage() for r in caplog.records if "lapsed claim" in r.getMessage()]
    assert f"key_digest={key_digest(KEY)}" in line and "on_lapse=rerun" in line
    held_for = float(line.split("held_for=")[1].split(" s")[0])
    assert 0 < held_for < 5


async def test_refuse_records_unknown_and_never_runs_it_again() -> None:
    tool = Tool()
    policy = _policy("refuse")
    async with _lapsed(policy, tool) as engine:
        first = await engine.handle(_call(policy), tool)
        again = await engine.handle(_call(policy), tool)
        assert _type(first) == _type(again) == "idempotency_outcome_unknown", (first, again)
        assert again.replayed and tool.calls == 1
        assert first.error is not None and first.error["code"] == -31061
        assert engine.stats.executions == 0 and engine.stats.lapsed_claims == 1


async def test_a_reconcile_that_finds_the_effect_is_recorded_and_replayed() -> None:
    tool = Tool()
    seen: list[LapsedCall] = []

    async def reconcile(call: LapsedCall) -> Outcome | None:
        seen.append(call)
        return Outcome.of_value({"charged": call.arguments["amount"]})

    policy = _policy(reconcile)
    async with _lapsed(policy, tool) as engine:
        first = await engine.handle(_call(policy), tool)
        again = await engine.handle(_call(policy), tool)
    assert first.result is not None and first.result["structuredContent"] == {"charged": 5}
    assert again.replayed and again.result == first.result
    assert tool.calls == 1 and len(seen) == 1
    (call,) = seen
    assert (call.tool, call.key, call.arguments) == ("charge", KEY, {"amount": 5})
    assert call.held_for is not None and 0 < call.held_for < 5
    assert call.claimed_at is not None and call.lapsed_at is not None


async def test_a_reconcile_that_finds_nothing_runs_the_tool_once() -> None:
    tool = Tool()
    policy = _policy(lambda call: None)  # sync is allowed
    async with _lapsed(policy, tool) as engine:
        first = await engine.handle(_call(policy), tool)
        again = await engine.handle(_call(policy), tool)
    assert first.result is not None and "run 2" in first.result["content"][0]["text"]
    assert again.replayed and again.result == first.result and tool.calls == 2


@pytest.mark.parametrize("failure", ["raises", "times out", "wrong type"])
async def test_an_undecided_reconcile_is_unknown_unrecorded_and_asked_again(failure: str) -> None:
    tool = Tool()
    asked = 0

    async def reconcile(call: LapsedCall) -> Any:
        nonlocal asked
        asked += 1
        if asked == 1:
            if failure == "raises":
                raise ConnectionError("the provider is down")
            if failure == "times out":
                await anyio.sleep(5)
            return "paid"  # not an Outcome
        return Outcome.of_value("found on the second look")

    policy = _policy(reconcile, reconcile_timeout=0.2)
    async with _lapsed(policy, tool) as engine:
        first = await engine.handle(_call(policy), tool)
        assert _type(first) == "idempotency_outcome_unknown" and not first.replayed, first
        second = await engine.handle(_call(policy), tool)
    assert second.result is not None and second.result["content"][0]["text"] == (
        "found on the second look"
    )
    assert asked == 2 and tool.calls == 1


async def test_a_blocking_sync_reconcile_is_bounded_and_its_late_answer_discarded() -> None:
    # A sync reconcile that blocks (a provider SDK without async, stuck on a socket) runs in
    # a worker thread: past reconcile_timeout the retry is answered unknown, nothing is
    # recorded, the claim is lapsed again, and what the thread returns later is dropped.
    tool = Tool()
    asked = 0
    returned = threading.Event()

    def reconcile(call: LapsedCall) -> Outcome | None:
        nonlocal asked
        asked += 1
        if asked == 1:
            time.sleep(1.0)
            returned.set()
            return Outcome.of_value("found too late")
        return Outcome.of_value("found on the second look")

    policy = _policy(reconcile, reconcile_timeout=0.3)
    async with _lapsed(policy, tool) as engine:
        began = time.monotonic()
        first = await engine.handle(_call(policy), tool)
        took = time.monotonic() - began
        assert _type(first) == "idempotency_outcome_unknown" and not first.replayed, first
        assert took < 0.9, f"answered after {took:.2f} s: the timeout did not bound it"
        await anyio.to_thread.run_sync(returned.wait, 5)
        await anyio.sleep(0.1)
        record = await engine.store.get(_scope_of(policy), KEY)
        assert record is not None and record.status is Status.LAPSED, record
        second = await engine.handle(_call(policy), tool)
    assert second.result is not None, second
    assert second.result["content"][0]["text"] == "found on the second look"
    assert asked == 2 and tool.calls == 1


async def test_an_async_reconcile_that_awaits_its_provider_is_bounded() -> None:
    # The documented form: the provider call is awaited (an async client, or a blocking one
    # sent to a thread), so the timeout interrupts it there.
    tool = Tool()

    def lookup(key: str) -> None:
        time.sleep(1.0)  # a blocking provider client

    async def reconcile(call: LapsedCall) -> Outcome | None:
        await anyio.to_thread.run_sync(lookup, call.key, abandon_on_cancel=True)
        return Outcome.of_value("found")

    policy = _policy(reconcile, reconcile_timeout=0.3)
    async with _lapsed(policy, tool) as engine:
        began = time.monotonic()
        first = await engine.handle(_call(policy), tool)
        took = time.monotonic() - began
    assert _type(first) == "idempotency_outcome_unknown", first
    assert took < 0.9 and tool.calls == 1


async def test_a_retry_while_reconciling_is_in_progress() -> None:
    tool = Tool()
    entered, leave = anyio.Event(), anyio.Event()

    async def reconcile(call: LapsedCall) -> Outcome | None:
        entered.set()
        await leave.wait()
        return Outcome.of_value("found")

    policy = _policy(reconcile)
    async with _lapsed(policy, tool) as engine:
        answers: list[Outcome] = []

        async def first() -> None:
            answers.append(await engine.handle(_call(policy), tool))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            with anyio.fail_after(5):
                await entered.wait()
            concurrent = await engine.handle(_call(policy), tool)
            leave.set()
    assert _type(concurrent) == "idempotency_key_in_progress", concurrent
    assert answers[0].result is not None and tool.calls == 1


async def test_other_arguments_conflict_with_a_lapsed_claim() -> None:
    tool = Tool()
    reconciled: list[LapsedCall] = []
    make: Callable[[LapsedCall], None] = reconciled.append  # type: ignore[assignment]
    policy = _policy(make)
    async with _lapsed(policy, tool) as engine:
        other = await engine.handle(_call(policy, amount=6), tool)
        assert _type(other) == "idempotency_key_conflict", other
        same = await engine.handle(_call(policy), tool)
    assert not reconciled[1:] and len(reconciled) == 1 and same.result is not None
    assert tool.calls == 2


def test_on_lapse_is_checked_when_declared() -> None:
    with pytest.raises(ValueError, match="on_lapse"):
        Policy.of(on_lapse="retry")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reconcile_timeout"):
        Policy.of(reconcile_timeout=0)


class _GatedStore(MemoryStore):
    """A MemoryStore whose claims, once `gate` is armed, wait for it before answering."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None
        self.waiting = anyio.Event()

    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        answer = await super().claim(*args, **kwargs)
        if self.gate is not None:
            self.waiting.set()
            await self.gate.wait()
        return answer


async def test_a_lapsed_claim_taken_over_while_shutting_down_is_given_back() -> None:
    # The retry's claim takes the lapsed claim over, and the server starts shutting down
    # before the answer arrives: the call is refused, not run, and the claim must go back to
    # lapsed (deleting it would let the next retry run the tool again, whatever on_lapse says).
    tool = Tool()
    policy = _policy("refuse")
    store = _GatedStore()
    dead = Engine(store, registry=Registry())
    async with anyio.create_task_group() as tg:
        tg.start_soon(dead.handle, _call(policy), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        with anyio.fail_after(5):
            await tool.started.wait()
        dead.keeper.close()
        await anyio.sleep(LEASE * 2)
        closing = Engine(store, registry=Registry())
        store.gate = anyio.Event()
        answers: list[Outcome] = []

        async def retry() -> None:
            answers.append(await closing.handle(_call(policy), tool))

        async with anyio.create_task_group() as inner:
            inner.start_soon(retry)
            with anyio.fail_after(5):
                await store.waiting.wait()
            inner.start_soon(closing.aclose)
            while not closing._closing:
                await anyio.sleep(0.01)
            store.gate.set()
        store.gate = None
        (refused,) = answers
        assert _type(refused) == "idempotency_store_unavailable", refused
        record = await store.get(_scope_of(policy), KEY)
        assert record is not None and record.status is Status.LAPSED, record
        later = Engine(store, registry=Registry())
        again = await later.handle(_call(policy), tool)
        await later.aclose()
        tg.cancel_scope.cancel()
    assert _type(again) == "idempotency_outcome_unknown", again
    assert tool.calls == 1
