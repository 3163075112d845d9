"""The lease keeper: renews the claims of running calls from its own thread and event loop.

Why a thread: a claim's lease must be renewed while its tool runs, *whether or not the tool
blocks the event loop* (docs/contract.md, Time). A sync `def` tool on mcp 1.x FastMCP runs inline on
the loop, and any async tool may call a blocking client; a renewal scheduled on that same loop
would wait for the tool to finish, the lease would run out, and a retry elsewhere would run the
tool a second time. So renewals live here, on one daemon thread with its own asyncio loop and
its own store connection (`Store.for_lease_keeper()`), for every live claim of one engine.

Cost on the call path: `hold` and `drop` are a lock, a dict write and (only when the keeper has
nothing earlier to do) a wake-up of the thread. Short calls, the common case, end long before
their first renewal is due and never cause any I/O here.

What a thread cannot do: run while another thread holds the GIL. One long C call that never
releases it (a catastrophic regex, `json` or `sorted` on huge data, some extensions) starves the
keeper, the lease runs out, and another instance sharing the store may claim the key and run
the tool a second time. That is not prevented here; it is never silent either: every renewal
(and every completion) later than the lease allows is reported to `on_lapse` with how late it
was, and the engine logs it at ERROR (`lease lapsed`) and counts it (`stats.lease_lapses`).

Where a store cannot give the keeper its own connection (`for_lease_keeper()` returns None,
or the store has no such method: written against the five operations alone, it may be bound to
the server's loop), renewals are sent to the engine's own event loop instead (asyncio, or trio
through its token): a blocked loop then delays them, and late completion (a store records an
outcome whose lease ran out while nobody else claimed the key) is what still saves the outcome.
The `idempotency_outcome_unknown` written past a call's `max_runtime` takes the same route.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..stores.base import Store, lease_keeper_store

__all__ = ["IDLE_EXIT", "RETRY_FRACTION", "Lease", "LeaseKeeper"]

log = logging.getLogger("idemtools")

RETRY_FRACTION = 0.1
"""After a failed renewal the next one is due in lease × this (instead of lease / 3)."""

IDLE_EXIT = 10.0
"""Seconds without any claim to renew after which the keeper's thread ends (it starts again on
the next claim): an idle server, or a test suite with many engines, keeps no thread around."""


class Lease:
    """One live claim the keeper renews: every `lease / 3` seconds until it is dropped."""

    __slots__ = (
        "call",
        "claimed",
        "deadline",
        "done",
        "due",
        "key",
        "lease",
        "loop",
        "owner",
        "renewed_at",
        "renewing",
        "reported",
        "scope",
        "tool",
        "trio",
    )

    def __init__(
        self,
        scope: str,
        key: str,
        owner: str,
        lease: float,
        due: float,
        loop: asyncio.AbstractEventLoop | None,
        deadline: float | None = None,
        tool: str = "",
        call: object = None,
        trio: object = None,
    ) -> None:
        self.scope = scope
        self.key = key
        self.owner = owner
        self.lease = lease
        self.due = due
        self.loop = loop  # the caller's asyncio loop, for stores without a keeper connection
        self.done = False  # dropped by the engine: a renewal still under way is ignored
        self.renewing = False  # a renewal is under way: never two at once for one claim
        # When the lease was last known to be extended: the send of the claim or of the last
        # renewal that succeeded (the store extends it on arrival, a little later). A renewal
        # or completion past `renewed_at + lease` may have found the lease lapsed.
        self.renewed_at = due - lease / 3
        self.reported = -1.0  # the `renewed_at` whose lapse was reported: once per gap
        # Held before the claim is sent (the loop may block between the claim landing and the
        # engine seeing the answer); until the engine confirms it, "not held" is no loss. The
        # engine clears it again while it records the outcome.
        self.claimed = False
        # time.monotonic() past which it is no longer renewed (the policy's max_runtime), and
        # the tool it runs, for the engine's ERROR.
        self.deadline = deadline
        self.tool = tool
        self.call = call  # the engine's own handle on the call, for `record_unknown`
        self.trio = trio  # without an asyncio loop: the caller's trio token, if any


class LeaseKeeper:
    """Renews every live claim of one store from a daemon thread; see the module docstring.

    Args:
        store: the engine's store; the keeper asks it for a connection of its own.
        on_lost: called (on the keeper thread) when a renewal found the claim taken by
            another owner: the engine counts it and logs it.
        on_error: called (on the keeper thread) when a renewal failed; it is tried again at
            the next interval.
        on_lapse: called with (lease, seconds late) when a renewal or the completion came later
            than the lease allows (the process could not renew in time: a tool holding the GIL,
            a paused process, an unreachable store); once per gap, from whichever thread saw it.
            By default logged at ERROR.
        timed: `timed("renew", awaitable)` wraps each renewal (the engine's telemetry times
            store operations); by default the renewal itself.
        on_overrun: called (on the keeper thread) when a claim's renewal fell due past its
            `max_runtime` and it is not renewed any more.
        record_unknown: `record_unknown(store, lease)` writes, through the keeper's own store
            (None: the caller's), what a call past its `max_runtime` answers from then on
            (the engine: `idempotency_outcome_unknown`, replaceable by the call's own
            outcome); True once written. Until it succeeds the claim stays renewed and the
            write is tried again; without it the claim simply lapses by lease.
    """

    def __init__(
        self,
        store: Store,
        *,
        on_lost: Callable[[Lease], None],
        on_error: Callable[[Lease, BaseException], None],
        on_lapse: Callable[[Lease, float], None] | None = None,
        timed: Callable[[str, Awaitable[bool]], Awaitable[bool]] = lambda _op, op: op,
        on_overrun: Callable[[Lease], None] = lambda _held: None,
        record_unknown: Callable[[Store, Lease], Coroutine[Any, Any, bool]] | None = None,
    ) -> None:
        self._on_overrun = on_overrun
        self._record_unknown = record_unknown
        self._source = store
        self._timed = timed
        self._on_lost = on_lost
        self._on_error = on_error
        self._on_lapse = on_lapse if on_lapse is not None else _log_lapse
        self._lock = threading.Lock()
        self._live: set[Lease] = set()  # by identity: a claim's Lease is its own handle
        self._target: float | None = None  # when the thread wakes next by itself
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._told = False  # the renewals' route was logged once

    @property
    def live(self) -> int:
        """Claims being renewed now."""
        return len(self._live)

    # -- the call path (any thread) --------------------------------------------------------

    def hold(
        self,
        scope: str,
        key: str,
        owner: str,
        lease: float,
        max_runtime: float | None = None,
        tool: str = "",
        call: object = None,
    ) -> Lease:
        """Start renewing a claim just made; `drop` it when the call has ended. With
        `max_runtime`, renewals stop that many seconds from now."""
        token: object = None
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # trio: its token, to renew there when the store needs it
            loop, token = None, _trio_token()
        now = time.monotonic()
        due = now + lease / 3
        held = Lease(
            scope,
            key,
            owner,
            lease,
            due,
            loop,
            None if max_runtime is None else now + max_runtime,
            tool,
            call,
            token,
        )
        with self._lock:
            if self._closing:
                return held  # shutting down: the engine refuses new calls; nothing to renew
            self._live.add(held)
            wake = self._target is None or due < self._target
            if wake:
                self._target = due
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._main, name="idemtools-lease-keeper", daemon=True
                )
                self._thread.start()
                wake = False  # the new thread reads the schedule when it starts
            target_loop, event = self._loop, self._wake
        if wake and target_loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the keeper's loop just closed
                target_loop.call_soon_threadsafe(event.set)
        return held

    def check(self, held: Lease, now: float | None = None) -> None:
        """Report a lapse if `held`'s lease ran out before `now` (default: the clock).

        The engine calls it when the tool returns: a keeper starved all along (by a tool that
        held the GIL) may not have run since, and a completion past the lease has lapsed too.
        """
        late = self._lapse(held, time.monotonic() if now is None else now)
        if late is not None:
            self._on_lapse(held, late)

    def _lapse(self, held: Lease, now: float) -> float | None:
        """Seconds past the lease at `now`, once per gap; None when in time or reported."""
        late = now - held.renewed_at - held.lease
        if late <= 0 or not held.claimed or held.done:
            return None
        with self._lock:
            if held.reported == held.renewed_at:
                return None
            held.reported = held.renewed_at
        return late

    def drop(self, held: Lease) -> None:
        """Stop renewing: the call ended (its outcome is about to be recorded, or released)."""
        held.done = True
        lock = self._lock
        lock.acquire()  # not `with`: see `hold`
        try:
            self._live.discard(held)
        finally:
            lock.release()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (after renewals under way end) and close its store connection."""
        with self._lock:
            self._closing = True
            thread, target_loop, event = self._thread, self._loop, self._wake
        if thread is None:
            return
        if target_loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):
                target_loop.call_soon_threadsafe(event.set)
        thread.join(timeout)

    # -- the keeper thread -----------------------------------------------------------------

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        wake = asyncio.Event()
        idle_since: float | None = None
        store = self._open_store()
        with self._lock:
            self._loop, self._wake = asyncio.get_running_loop(), wake
        try:
            while True:
                wake.clear()
                with self._lock:
                    if self._closing:
                        break
                    idle = idle_since is not None and time.monotonic() - idle_since >= IDLE_EXIT
                    if idle and not self._live:
                        # Nothing to renew for a while: end the thread; `hold` starts a new
                        # one when a claim needs it.
                        self._thread = None
                        self._loop = self._wake = None
                        break
                    now = time.monotonic()
                    due = [h for h in self._live if h.due <= now and not h.renewing]
                    overrun = [h for h in due if h.deadline is not None and now >= h.deadline]
                    for held in overrun:  # past max_runtime: no more renewals
                        due.remove(held)
                        if self._record_unknown is None:
                            self._live.discard(held)
                        else:  # renewed on until the unknown outcome is written
                            held.due = now + held.lease * RETRY_FRACTION
                            held.renewing = True
                    for held in due:
                        held.due = now + held.lease / 3
                        held.renewing = True
                    target = min((h.due for h in self._live), default=None)
                    if target is None:
                        idle_since = now if idle_since is None else idle_since
                        target = now + IDLE_EXIT
                    else:
                        idle_since = None
                    # When this thread wakes by itself: `hold` wakes it earlier only for a
                    # renewal due before then (not for every call: most end long before).
                    self._target = target
                for held in overrun:
                    if self._record_unknown is not None:
                        task = asyncio.create_task(self._overrun(store, held, now))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)
                        continue
                    self._overran(held)
                for held in due:
                    late = self._lapse(held, now)
                    if late is not None:
                        self._on_lapse(held, late)
                    task = asyncio.create_task(self._renew(store, held, now))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                timeout = max(0.0, target - time.monotonic())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), timeout)
        finally:
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=5.0)
            if store is not None and store is not self._source:
                try:
                    await store.aclose()
                except Exception as exc:
                    log.warning("lease keeper: closing its store connection failed: %r", exc)

    def _open_store(self) -> Store | None:
        try:
            store: Store | None = lease_keeper_store(self._source)
            if store is None and not hasattr(self._source, "for_lease_keeper") and not self._told:
                self._told = True
                log.info(
                    "lease keeper: %s store has no for_lease_keeper(); its claims are renewed "
                    "on the server's event loop, where its calls run (a tool that blocks that "
                    "loop delays them). Define for_lease_keeper() returning the store itself "
                    "if its operations may run on any event loop and thread",
                    self._source.kind,
                )
        except Exception as exc:
            log.error(
                "lease keeper: %s store could not open a connection of its own (%r); "
                "renewals go through the server's event loop",
                self._source.kind,
                exc,
            )
            return None
        return store

    async def _renew(self, store: Store | None, held: Lease, sent: float) -> None:
        try:
            ok = await self._timed(
                "renew",
                store.renew(held.scope, held.key, held.owner, held.lease)
                if store is not None
                else self._renew_on_caller_loop(held),
            )
        except Exception as exc:
            if not held.done:
                self._on_error(held, exc)
                # Try again soon, not a whole interval later: a store that is back within the
                # lease (a restart, a failover) must see the renewal before the lease ends.
                with self._lock:
                    held.due = min(held.due, time.monotonic() + held.lease * RETRY_FRACTION)
                if self._wake is not None:
                    self._wake.set()
        else:
            if ok:
                # Through the caller's loop a renewal may wait behind a blocked tool: one that
                # succeeded only after the lease ran out had lapsed all the same.
                late = self._lapse(held, time.monotonic())
                if late is not None:
                    self._on_lapse(held, late)
                held.renewed_at = max(held.renewed_at, sent)
            elif not held.done and held.claimed:
                self.drop(held)
                self._on_lost(held)
        finally:
            held.renewing = False

    def _overran(self, held: Lease) -> None:
        try:
            self._on_overrun(held)
        except Exception:  # a callback's bug must not stop every other renewal
            log.exception("lease keeper: on_overrun failed")

    async def _overrun(self, store: Store | None, held: Lease, sent: float) -> None:
        """Past `max_runtime`: write the unknown outcome, then stop renewing. A failed write
        renews the claim instead (so it does not lapse) and is tried again."""
        assert self._record_unknown is not None
        try:
            if store is not None:
                written = await self._record_unknown(store, held)
            elif held.loop is not None or held.trio is not None:
                written = await self._record_on_caller_loop(held)
            else:  # no loop of the caller's to reach: renewed on, and tried again
                written = False
        except Exception as exc:
            written = False
            if not held.done:
                self._on_error(held, exc)
        if held.done:  # the call ended meanwhile: its own outcome is recorded
            held.renewing = False
            return
        if written:
            with self._lock:
                self._live.discard(held)
            held.claimed = False  # no more renewals, and none is late
            held.renewing = False
            self._overran(held)
            return
        held.renewing = False
        await self._renew(store, held, sent)

    async def _record_on_caller_loop(self, held: Lease) -> bool:
        """The unknown outcome written where the store's calls run, as renewals are for a
        store without a connection of the keeper's own: the caller's asyncio loop, or its trio
        run through the trio token (a blocked loop delays it, as it delays renewals)."""
        assert self._record_unknown is not None
        record, source = self._record_unknown, self._source

        async def write() -> bool:
            # It reaches the caller's loop later: by then the call may be recording its own
            # outcome or have ended, and nothing must be written over it.
            if held.done or not held.claimed:
                return False
            return await record(source, held)

        return await _on_caller_loop(held, write)

    async def _renew_on_caller_loop(self, held: Lease) -> bool:
        source = self._source

        async def renew() -> bool:
            # It reaches the caller's loop later: by then the call may be recording its
            # outcome or have ended, and a renewal would only race its record.
            if held.done or not held.claimed:
                return True
            return await source.renew(held.scope, held.key, held.owner, held.lease)

        if held.loop is None and held.trio is None:
            return True  # no loop to reach: late completion covers it
        return await _on_caller_loop(held, renew)


async def _on_caller_loop(held: Lease, work: Callable[[], Coroutine[Any, Any, bool]]) -> bool:
    """`work()` run on the caller's own loop, from the keeper's: its asyncio loop, or its trio
    run through the trio token (one of the two must be known)."""
    if held.loop is None:
        import trio

        run: Callable[..., bool] = trio.from_thread.run
        return await asyncio.to_thread(run, work, trio_token=held.trio)
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work(), held.loop))


def _trio_token() -> object:
    """The running trio run's token, or None (no trio, or not inside it)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


def _log_lapse(held: Lease, late: float) -> None:
    log.error(
        "lease lapsed for a running call: renewed %.3f s late (lease %.3f s); another instance "
        "may have run it a second time (a tool holding the GIL or a paused process cannot "
        "renew)",
        late,
        held.lease,
    )
