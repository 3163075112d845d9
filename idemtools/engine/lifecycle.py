"""The engine's shutdown: which executions are in flight, `drain()` and `aclose()`.

In flight counts from the moment a call's claim is sent until its outcome is recorded (or its
claim released), so that closing never pulls the store from under a claim on its way or an
outcome being written. A server's lifespan (`idemtools.server.shutdown`) drains before the
event loop tears down, which is what lets an execution run to its record however its caller ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .decision import key_digest
from .runtime import on_asyncio, shielded, spawn

if TYPE_CHECKING:
    from .execution import Execution
    from .lease_keeper import LeaseKeeper
    from .store_calls import StoreCalls

__all__ = ["Lifecycle"]

log = logging.getLogger("idemtools")


class Lifecycle:
    """Shutdown bookkeeping, a base of `Engine` (its attributes are the engine's)."""

    keeper: LeaseKeeper
    _calls: StoreCalls

    def _init_lifecycle(self) -> None:
        self._background: set[asyncio.Task[Any]] = set()
        self._executing: set[Execution] = set()
        self._idle: anyio.Event | None = None
        self._closing = False
        self._close_when_idle = False  # aclose() returned with calls running: the last closes
        self._closed = False

    @property
    def executing(self) -> int:
        """Keyed calls in flight now: from the moment their claim is sent until their outcome
        is recorded (or the claim released)."""
        return len(self._executing)

    def _ended_now(self, ex: Execution) -> bool:
        """An execution ended: wake `drain()`. True when it was the last one out after
        `aclose()` returned, so the caller must close what was left open (`_close_later`)."""
        self._executing.discard(ex)
        if self._executing:
            return False
        if self._idle is not None:
            self._idle.set()
        if self._close_when_idle:
            self._close_when_idle = False
            return True
        return False

    async def _ended(self, ex: Execution) -> None:
        if self._ended_now(ex):
            await self._close_later()

    async def _close_later(self) -> None:
        """Close the lease keeper and the store that `aclose()` left open for calls still
        running: from a task of its own on asyncio (not in the last call's answer path),
        inline under a shield on trio."""
        log.info("shutdown: the last keyed call still running has ended; closing the store")
        if on_asyncio():
            spawn(self._close_now(), self._background)
        else:
            with shielded():
                await self._close_now()

    async def drain(self, grace: float | None = None) -> bool:
        """Refuse new keyed calls, then wait for the ones in flight to be recorded.

        In flight counts from the moment a call's claim is sent: a claim that comes back
        "claimed" after closing began is released (fenced by owner) and refused, never run.
        Their leases stay renewed while this waits. Waits at most `grace` seconds (default:
        the longest lease among them: past it, a crashed server's claim would have ended too).
        Returns True when every one was recorded; otherwise logs each still running at ERROR
        (tool, key digest, how long it has run) and returns False.
        """
        self._closing = True
        if not self._executing:
            return True
        if grace is None:
            grace = max(ex.policy.lease for ex in self._executing)
        self._idle = anyio.Event()
        with anyio.move_on_after(grace):
            while self._executing:
                await self._idle.wait()
                self._idle = anyio.Event()
        if not self._executing:
            return True
        now = time.time()
        running = sorted(self._executing, key=lambda ex: ex.started)
        for ex in running:
            log.error(
                "shutdown: keyed call still running after the %.1f s grace tool=%s "
                "key_digest=%s scope=%s running_for=%.1fs; its lease stays renewed while this "
                "process lives, and its outcome is recorded if it ends; if the process exits "
                "first, its claim lapses by lease and a retry follows the tool's on_lapse "
                "(rerun, the default, runs it again)",
                grace,
                ex.tool,
                key_digest(ex.key),
                ex.scope,
                now - ex.started,
            )
        return False

    async def aclose(self, grace: float | None = None) -> None:
        """Drain (see `drain`), then stop the lease keeper and close the store.

        When calls are still running after the grace, this returns (each is logged at ERROR)
        but the keeper and the store stay open for them until the last one has ended: a
        process that keeps running (a server still waiting on its handlers) keeps their
        leases alive and records their outcomes; one that exits cuts them off, and their
        claims lapse by lease (the SEP's crash limit).
        """
        if await self.drain(grace):
            await self._close_now()
            return
        self._close_when_idle = True
        if not self._executing:  # the last one ended just now
            self._close_when_idle = False
            await self._close_now()

    async def _close_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        await anyio.to_thread.run_sync(self.keeper.close)
        await self._calls.aclose()
