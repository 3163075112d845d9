"""The end of a transport, and a process told to stop: keyed calls in flight are recorded first.

Why this exists: `asyncio.run` (and `anyio.run`, which every SDK's `server.run()` uses) cancels
every task still alive once its main coroutine returns. A keyed call's execution runs in a task
of its own, shielded from its caller, so it outlives a client that went away; it does not
outlive that teardown. The SDK's runner returns the moment stdin reaches EOF, uvicorn returns
once its lifespan has shut down, and SIGTERM's default action ends the process at once: in each
case a tool that had done its side effect was cut off before its outcome was recorded, and the
retry on the next process ran it again.

So every runner idemtools can see is wrapped in `serving(installation)`: when it ends, however
it ends, `Installation.aclose(grace)` runs (shielded) before the runner returns to the event
loop's teardown: new keyed calls are refused, the ones in flight finish and are recorded.
Wrapped: `run_stdio_async` (what `run()` runs on stdio, on every server type) and the ASGI
apps the servers build (`streamable_http_app()`, `sse_app()`, FastMCP's `http_app()`): their
lifespan, which uvicorn runs and shuts down after its last request, wherever it serves them
(`run("streamable-http")`, `uvicorn app:app`, mounted in another app's lifespan).

Signals. While something is being served, in the main thread of a process whose event loop is
asyncio, SIGTERM and SIGINT go through a handler of idemtools' (installed with `signal.signal`
from that loop, the previous handler kept and restored afterwards):

- The first one starts the shutdown at once (keyed calls refused from then on, the running ones
  waited for), and passes the signal on to the handler that was there before. A handler that
  would end the process or cancel every task at once — the default action, Python's
  `default_int_handler` (KeyboardInterrupt), the interrupt handler of `asyncio.run`/`anyio.run`
  — gets it only once the calls in flight are recorded; any other (uvicorn's, yours) gets it
  immediately, as it would have, and idemtools waits where that graceful stop ends.
- A second SIGINT or SIGTERM ends the process at once (the signal's default action), after one
  ERROR naming how many keyed calls are abandoned; their claims lapse by lease.

This module imports no SDK: adapters hand it the objects to wrap.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import anyio

__all__ = ["SHUTDOWN_SIGNALS", "hook_transports", "serving"]

log = logging.getLogger("idemtools")

SHUTDOWN_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)
ANSWER_GRACE = 0.2
"""Seconds between the drain's end and a deferred signal's default action (see `_drain`)."""


class _Executing(Protocol):
    @property
    def executing(self) -> int: ...


class Installation(Protocol):
    """What a shutdown needs of an `idemtools.Installation`: typed structurally, so that this
    module imports no `installation` (which imports this one when it hooks transports)."""

    @property
    def engine(self) -> _Executing: ...

    @property
    def shutdown_grace(self) -> float | None: ...

    async def aclose(self, grace: float | None = None) -> None: ...


_RUNNERS = ("run_stdio_async",)
"""Coroutine methods that serve one transport for the whole process and return when it ends."""

_APP_FACTORIES = ("streamable_http_app", "sse_app", "http_app")
"""Methods returning an ASGI (Starlette) app whose lifespan is the server's life over HTTP."""

_HOOKED = "__idemtools_shutdown_hooked__"

Handler = Callable[[int, Any], Any] | int | None


def _ends_at_once(handler: Handler) -> bool:
    """A handler after which nothing in flight survives: deferred until the drain ends."""
    if handler is signal.SIG_DFL or handler is signal.default_int_handler:
        return True
    # asyncio.Runner / anyio's backport: `partial(self._on_sigint, main_task=...)` cancels the
    # main task, and so, through the runner's teardown, every task.
    func = handler.func if isinstance(handler, functools.partial) else handler
    return getattr(func, "__name__", "") == "_on_sigint"


class _Watch:
    """The process's signal handling while anything is served (signals are process-wide)."""

    def __init__(self) -> None:
        self.serving: dict[int, tuple[Installation, int]] = {}  # id → (installation, depth)
        self.previous: dict[int, Handler] = {}
        self.ours: dict[int, Callable[[int, Any], None]] = {}
        self.loop: asyncio.AbstractEventLoop | None = None
        self.signalled: list[int] = []
        self.deferred: list[tuple[int, Handler]] = []
        self.drain: asyncio.Task[None] | None = None

    # -- served installations -------------------------------------------------------------

    def installations(self) -> list[Installation]:
        return [inst for inst, _ in self.serving.values()]

    def enter(self, installation: Installation) -> None:
        _, depth = self.serving.get(id(installation), (installation, 0))
        self.serving[id(installation)] = (installation, depth + 1)
        self._install()

    def leave(self, installation: Installation) -> None:
        _, depth = self.serving.get(id(installation), (installation, 1))
        if depth > 1:
            self.serving[id(installation)] = (installation, depth - 1)
            return
        self.serving.pop(id(installation), None)
        if not self.serving:
            self._restore()
            self._deliver_deferred()
            self.signalled.clear()
            self.drain = None

    def running(self) -> int:
        return sum(inst.engine.executing for inst in self.installations())

    # -- handlers -------------------------------------------------------------------------

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works only there (uvicorn in a thread: its host's business)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio: its own signal handling; idemtools stays out of it
            return
        self.loop = loop
        for sig in SHUTDOWN_SIGNALS:
            current = signal.getsignal(sig)
            if current is self.ours.get(sig):
                continue  # already ours (an outer runner installed it)
            if current is signal.SIG_IGN or current is None:
                continue  # ignored on purpose, or installed outside Python: not ours to touch
            handler = functools.partial(self._on_signal)
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):  # pragma: no cover - embedded interpreters
                continue
            self.previous[sig] = current
            self.ours[sig] = handler

    def _restore(self) -> None:
        for sig, handler in list(self.ours.items()):
            if signal.getsignal(sig) is handler:
                with contextlib.suppress(ValueError, OSError):
                    signal.signal(sig, self.previous[sig])
            del self.ours[sig]
            self.previous.pop(sig, None)

    def _on_signal(self, sig: int, frame: Any) -> None:
        # Runs in the main thread between two bytecodes, maybe inside the event loop itself:
        # only flags and `call_soon_threadsafe` here, the work happens in the loop.
        previous = self.previous.get(sig, signal.SIG_DFL)
        if self.signalled:
            self._exit_at_once(sig)
            return
        self.signalled.append(sig)
        log.warning(
            "%s received: refusing new keyed calls, waiting for %d in flight to be recorded",
            signal.Signals(sig).name,
            self.running(),
        )
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._start_drain)
        if _ends_at_once(previous):
            self.deferred.append((sig, previous))
        elif callable(previous):
            previous(sig, frame)

    def _exit_at_once(self, sig: int) -> None:
        running = self.running()
        if running:
            log.error(
                "second %s: exiting at once; %d keyed call(s) still running are abandoned "
                "and not recorded (their claims end by lease, then a retry runs them again)",
                signal.Signals(sig).name,
                running,
            )
        signal.signal(sig, signal.SIG_DFL)
        signal.raise_signal(sig)

    def _start_drain(self) -> None:
        if self.drain is not None or self.loop is None:
            return
        self.drain = self.loop.create_task(self._drain())

    async def _drain(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                for inst in self.installations():
                    tg.start_soon(inst.aclose, inst.shutdown_grace)
            # Recorded is not yet answered: the SDK's writer task sends each answer a few loop
            # turns after its record. A moment for it before a signal's default action ends the
            # process, so the host gets the answer rather than a retry's replay.
            await anyio.sleep(ANSWER_GRACE)
        finally:
            self._deliver_deferred()

    def _deliver_deferred(self) -> None:
        """Pass on the signals whose previous handler had to wait for the drain."""
        deferred, self.deferred = self.deferred, []
        for sig, previous in deferred:
            if callable(previous):
                previous(sig, None)  # the runner's interrupt handler: cancels its main task
            else:
                self._restore()
                signal.signal(sig, signal.SIG_DFL)
                signal.raise_signal(sig)  # the default action, now that nothing is in flight


_WATCH = _Watch()


@contextlib.asynccontextmanager
async def serving(installation: Installation) -> AsyncIterator[None]:
    """Serve a transport: when it ends, however it ends (return, error, cancellation), the
    keyed calls in flight are waited for and recorded before control goes back to the caller
    (`Installation.aclose(installation.shutdown_grace)`, shielded from cancellation)."""
    _WATCH.enter(installation)
    try:
        yield
    finally:
        if installation.engine.executing:
            log.info(
                "transport ended: waiting for %d keyed call(s) in flight to be recorded",
                installation.engine.executing,
            )
        try:
            with anyio.CancelScope(shield=True):
                await installation.aclose(installation.shutdown_grace)
        finally:
            _WATCH.leave(installation)


def _wrap_runner(installation: Installation, owner: Any, name: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    async def runner(*args: Any, **kwargs: Any) -> Any:
        async with serving(installation):
            return await inner(*args, **kwargs)

    setattr(owner, name, runner)


def _wrap_app_factory(installation: Installation, owner: Any, name: str) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def factory(*args: Any, **kwargs: Any) -> Any:
        app = inner(*args, **kwargs)
        hook_app_lifespan(installation, app)
        return app

    setattr(owner, name, factory)


def hook_app_lifespan(installation: Installation, app: Any) -> bool:
    """Wrap a Starlette app's lifespan in `serving()`, inside the app's own lifespan (so the
    tools still have what that lifespan set up while they finish). False if it has none."""
    router: Any = getattr(app, "router", None)
    inner = getattr(router, "lifespan_context", None)
    if router is None or inner is None or getattr(inner, _HOOKED, False):
        return False

    @contextlib.asynccontextmanager
    async def lifespan(asgi: Any) -> AsyncIterator[Any]:
        async with inner(asgi) as state, serving(installation):
            yield state

    setattr(lifespan, _HOOKED, True)
    router.lifespan_context = lifespan
    return True


def hook_transports(installation: Installation, *owners: Any) -> None:
    """Wrap each owner's process-level runners and ASGI app factories (those it has)."""
    seen: set[int] = set()
    for owner in owners:
        if owner is None or id(owner) in seen:
            continue
        seen.add(id(owner))
        for name in _RUNNERS:
            if callable(getattr(owner, name, None)):
                _wrap_runner(installation, owner, name)
        for name in _APP_FACTORIES:
            if callable(getattr(owner, name, None)):
                _wrap_app_factory(installation, owner, name)
