"""Lease renewal while a tool runs, on real time, on asyncio and (if installed) trio.

The engine's lease keeper (its own thread and event loop) renews a running call's lease every
lease/3 and stops when the call ends, whichever backend the call runs on. These tests hold both
backends to the same behaviour: a call longer than its lease keeps its claim (the record stays
in progress and no other owner can claim it), a short call is never renewed, nothing is renewed
once the call has ended (a renewal still under way then is fenced by the store), a lost claim
stops renewal, and a failing renewal is logged, counted and retried. Blocking tools:
tests/engine/test_lease_keeper.py.

Each test is a plain function running `anyio.run(..., backend=...)`, so it does not depend on
which async pytest plugin is active.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.canonical import fingerprint
from idemtools.engine import ToolCall
from idemtools.stores import MemoryStore
from idemtools.stores.base import Claim, Record, Status

LEASE = 0.3  # renewal every 0.1 s
POLICY = Policy.of(retention=60, lease=LEASE, scope=shared)

BACKENDS = [
    pytest.param("asyncio"),
    pytest.param(
        "trio",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("trio") is None, reason="trio is not installed"
        ),
    ),
]


def ok(text: str) -> Outcome:
    return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False})


def call(key: str = "k") -> ToolCall:
    return ToolCall(name="charge", arguments={"amount": 10}, key=key, policy=POLICY)


def run_on(backend: str, test: Callable[[], Awaitable[None]]) -> None:
    anyio.run(test, backend=backend)


class Recording:
    """A MemoryStore (real clock) that records claims, renewals and completions as they happen.

    `renew_result` / `renew_error` make renewals answer "not held" or fail; `renew_delay` keeps
    each renewal in flight for a while, so a call can end during one.
    """

    kind = "recording"

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.scope = ""
        self.owner = ""
        self.renewals: list[float] = []
        self.renewing = 0
        self.completed_at: float | None = None
        self.renew_result: bool | None = None
        self.renew_errors = 0
        self.renew_delay = 0.0

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        claim = await self.inner.claim(scope, key, fingerprint, owner, lease)
        if claim.claimed:
            self.scope, self.owner = scope, owner
        return claim

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        self.renewals.append(time.monotonic())  # the keeper's thread has its own loop
        self.renewing += 1
        try:
            if self.renew_delay:
                await anyio.sleep(self.renew_delay)
            if self.renew_errors:
                self.renew_errors -= 1
                raise ConnectionError("renewal failed on purpose")
            held = await self.inner.renew(scope, key, owner, lease)
            return held if self.renew_result is None else self.renew_result
        finally:
            self.renewing -= 1

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        self.completed_at = time.monotonic()
        return await self.inner.complete(
            scope, key, owner, outcome, retention, fingerprint=fingerprint
        )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        return await self.inner.release(scope, key, owner)

    async def get(self, scope: str, key: str) -> Record | None:
        return await self.inner.get(scope, key)

    async def aclose(self) -> None:
        await self.inner.aclose()


def sleeper(seconds: float, text: str = "done") -> Callable[[], Awaitable[Outcome]]:
    async def run() -> Outcome:
        await anyio.sleep(seconds)
        return ok(text)

    return run


async def no_renewal_after(store: Recording) -> None:
    """After the call: wait longer than a lease; a leftover timer or task would renew by then."""
    assert store.completed_at is not None
    await anyio.sleep(LEASE * 1.5)
    assert [t for t in store.renewals if t >= store.completed_at] == []
    assert store.renewing == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_call_is_renewed_and_keeps_its_claim(backend: str) -> None:
    async def main() -> None:
        store = Recording()
        engine = Engine(store, registry=Registry())
        fp = fingerprint("charge", {"amount": 10})
        seen: list[tuple[Status, str, bool]] = []
        inner: list[Outcome] = []

        async def long_running() -> Outcome:
            # 1 s in all, sampled after the first lease (0.3 s) would have run out unrenewed.
            for _ in range(5):
                await anyio.sleep(0.2)
                record = await store.get(store.scope, "k")
                assert record is not None
                other = await store.inner.claim(store.scope, "k", fp, "other-owner", LEASE)
                seen.append((record.status, record.owner, other.claimed))
            inner.append(await engine.handle(call(), sleeper(0, "second run")))
            return ok("long")

        assert await engine.handle(call(), long_running) == ok("long")
        assert seen == [(Status.IN_PROGRESS, store.owner, False)] * 5
        assert inner[0].error is not None
        assert inner[0].error["data"]["type"] == "idempotency_key_in_progress"
        # every lease/3 = 0.1 s over 1 s: about 9; a loaded machine may manage fewer
        assert len(store.renewals) >= 4
        assert engine.stats.lost_claims == 0 and engine.stats.store_errors == 0
        await no_renewal_after(store)
        record = await store.get(store.scope, "k")
        assert record is not None and record.status is Status.COMPLETED
        assert await engine.handle(call(), sleeper(0, "again")) == ok("long")

    run_on(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_short_call_is_never_renewed(backend: str) -> None:
    async def main() -> None:
        store = Recording()
        engine = Engine(store, registry=Registry())
        for i in range(20):
            assert await engine.handle(call(f"k{i}"), sleeper(0)) == ok("done")
        assert await engine.handle(call("slower"), sleeper(LEASE / 6)) == ok("done")
        await no_renewal_after(store)
        assert store.renewals == []
        assert engine.stats.executions == 21

    run_on(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_call_ending_during_a_renewal_keeps_the_completed_record(backend: str) -> None:
    async def main() -> None:
        store = Recording()
        store.renew_delay = 0.2  # the call ends while the first renewal is still in flight
        engine = Engine(store, registry=Registry())
        assert await engine.handle(call(), sleeper(LEASE / 3 + 0.05)) == ok("done")
        assert len(store.renewals) == 1
        await no_renewal_after(store)
        # The renewal that was under way at completion is fenced (the record is completed,
        # not in progress) and its "not held" answer is not mistaken for a lost claim.
        record = await store.get(store.scope, "k")
        assert record is not None and record.status is Status.COMPLETED
        assert engine.stats.lost_claims == 0
        assert await engine.handle(call(), sleeper(0, "again")) == ok("done")

    run_on(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lost_claim_stops_renewal(backend: str) -> None:
    async def main() -> None:
        store = Recording()
        store.renew_result = False
        engine = Engine(store, registry=Registry())
        assert await engine.handle(call(), sleeper(0.6)) == ok("done")
        assert len(store.renewals) == 1  # not renewed again once the claim was lost
        # counted once, by the renewal; nobody else claimed the key after the unrenewed lease
        # ran out, so the late completion still records the outcome
        assert engine.stats.lost_claims == 1
        await no_renewal_after(store)
        record = await store.get(store.scope, "k")
        assert record is not None and record.status is Status.COMPLETED

    run_on(backend, main)


@pytest.mark.parametrize("backend", BACKENDS)
def test_failed_renewal_is_logged_counted_and_retried(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = Recording()
        store.renew_errors = 1
        engine = Engine(store, registry=Registry())
        assert await engine.handle(call(), sleeper(0.6)) == ok("done")
        assert len(store.renewals) >= 3  # a failure, then renewed again lease/3 later
        assert engine.stats.store_errors == 1
        assert engine.stats.lost_claims == 0
        await no_renewal_after(store)

    with caplog.at_level(logging.WARNING, logger="idemtools"):
        run_on(backend, main)
    assert sum("lease renewal failed" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelled_caller_does_not_stop_the_call_or_its_renewal(backend: str) -> None:
    async def main() -> None:
        store = Recording()
        engine = Engine(store, registry=Registry())
        results: list[Outcome] = []

        async def caller() -> None:
            results.append(await engine.handle(call(), sleeper(0.5, "charged")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await anyio.sleep(0.1)
            tg.cancel_scope.cancel()  # the shielded call goes on to its record
        assert results in ([], [ok("charged")])  # the caller may see its cancellation
        with anyio.fail_after(5):  # the call goes on without its caller, to its record
            while store.completed_at is None:
                await anyio.sleep(0.02)
        assert len(store.renewals) >= 2
        await no_renewal_after(store)
        assert await engine.handle(call(), sleeper(0, "again")) == ok("charged")

    run_on(backend, main)


# -- records as the engine writes them: MemoryStore keeps hex as raw bytes --------------------


@pytest.mark.parametrize(
    ("fp", "owner"),
    [
        ("ab" * 32, "cd" * 16),  # what the engine writes: packed as 48 bytes
        ("AB" * 32, "cd" * 16),  # upper case: fromhex accepts it, so it must not be packed
        ("ab" * 31 + " a", "cd" * 16),  # a space: likewise
        ("ab" * 32, "CD" * 16),
        ("ab" * 32, "cd" * 15),  # shorter owner
        ("fp", "o"),
    ],
)
def test_memory_store_returns_fingerprint_and_owner_exactly(fp: str, owner: str) -> None:
    async def main() -> None:
        store = MemoryStore()
        scope = "ef" * 32
        assert (await store.claim(scope, "k", fp, owner, 30)).claimed
        existing: Any = (await store.claim(scope, "k", "x", "y", 30)).existing
        assert (existing.fingerprint, existing.owner) == (fp, owner)
        assert await store.renew(scope, "k", owner, 30)
        assert not await store.renew(scope, "k", owner.upper() + "x", 30)
        assert await store.complete(scope, "k", owner, b"{}", 60)
        record = await store.get(scope, "k")
        assert record is not None
        assert (record.status, record.fingerprint, record.owner) == (Status.COMPLETED, fp, owner)
        # a scope spelled in upper case is another scope, not the same 32 bytes
        assert await store.get(scope.upper(), "k") is None

    anyio.run(main)
