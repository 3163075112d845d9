"""A custom store written against the five operations alone (no `for_lease_keeper`), whose
client belongs to the loop that first used it, as an async driver's does: its claims are renewed
on the server's own loop, where its calls run, so a call longer than its lease keeps its claim,
on asyncio and trio alike. (Renewed from the lease keeper's thread, every renewal failed while
the calls went on.)"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import threading
import time

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.canonical import fingerprint
from idemtools.engine import ToolCall
from idemtools.stores import MemoryStore
from idemtools.stores.base import Claim, Record, Status

LEASE = 0.3  # renewed every 0.1 s
POLICY = Policy.of(retention=60, lease=LEASE, scope=shared)
BACKENDS = [
    "asyncio",
    pytest.param(
        "trio",
        marks=pytest.mark.skipif(importlib.util.find_spec("trio") is None, reason="no trio"),
    ),
]


class LoopBound:
    """Five operations over a dict, behind a lock made at construction; like an async driver's
    client it belongs to the thread (and so the loop) that first used it, and refuses others."""

    kind = "loop-bound"

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.lock = anyio.Lock()  # made at construction, as the store's users write it
        self.thread: int | None = None
        self.scope = ""
        self.renewals: list[float] = []
        self.refused = 0

    async def _enter(self) -> None:
        here = threading.get_ident()
        if self.thread is None:
            self.thread = here
        elif here != self.thread:
            self.refused += 1
            raise RuntimeError("the store's client is attached to a different loop")

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        await self._enter()
        self.scope = scope
        async with self.lock:
            return await self.inner.claim(scope, key, fingerprint, owner, lease)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        await self._enter()
        async with self.lock:
            self.renewals.append(time.monotonic())
            return await self.inner.renew(scope, key, owner, lease)

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
        await self._enter()
        async with self.lock:
            return await self.inner.complete(
                scope, key, owner, outcome, retention, fingerprint=fingerprint
            )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        await self._enter()
        async with self.lock:
            return await self.inner.release(scope, key, owner)

    async def get(self, scope: str, key: str) -> Record | None:
        await self._enter()
        async with self.lock:
            return await self.inner.get(scope, key)

    async def aclose(self) -> None:
        await self.inner.aclose()


def ok(text: str) -> Outcome:
    return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False})


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_bound_custom_store_is_renewed_on_the_servers_loop(
    backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        store = LoopBound()
        engine = Engine(store, registry=Registry())
        call = ToolCall(name="t", arguments={"n": 1}, key="k", policy=POLICY)
        fp = fingerprint("t", {"n": 1})
        held: list[bool] = []

        async def long_running() -> Outcome:
            for _ in range(4):  # 1.2 s: four leases; unrenewed, the claim would lapse
                await anyio.sleep(LEASE)
                other = await store.inner.claim(store.scope, "k", fp, "another", LEASE)
                held.append(not other.claimed)
            return ok("long")

        assert await engine.handle(call, long_running) == ok("long")
        assert store.refused == 0, "a renewal reached the store from another loop"
        assert len(store.renewals) >= 4  # about every lease / 3
        assert engine.stats.store_errors == 0 and engine.stats.lost_claims == 0
        assert held == [True] * 4  # no other owner could claim the key meanwhile
        record = await store.inner.get(store.scope, "k")
        assert record is not None and record.status is Status.COMPLETED
        assert await engine.handle(call, long_running) == ok("long")  # replayed
        await engine.aclose()

    with caplog.at_level(logging.INFO, logger="idemtools"):
        anyio.run(main, backend=backend)
    assert "has no for_lease_keeper()" in caplog.text


def test_a_store_that_says_it_runs_anywhere_is_renewed_from_the_keepers_thread() -> None:
    """`for_lease_keeper()` returning the store: renewals keep their own thread (a tool that
    blocks the server's loop does not delay them)."""

    class Anywhere(LoopBound):
        async def _enter(self) -> None:
            pass

        def for_lease_keeper(self) -> Anywhere:
            return self

    async def main() -> None:
        store = Anywhere()
        engine = Engine(store, registry=Registry())
        call = ToolCall(name="t", arguments={"n": 2}, key="k2", policy=POLICY)

        async def blocks_the_loop() -> Outcome:
            time.sleep(LEASE * 2)  # noqa: ASYNC251 - the blocked loop under test
            return ok("blocked")

        assert await engine.handle(call, blocks_the_loop) == ok("blocked")
        assert len(store.renewals) >= 3
        assert engine.stats.lease_lapses == 0
        await engine.aclose()

    asyncio.run(main())
