"""What differs between asyncio and trio, in one place: how an execution is shielded from its
caller's cancellation, how background work is started, and whether a cancellation is the
execution's own.

The rest of the engine asks `on_asyncio()` or calls `protect`, `spawn`, `shielded`; it never
imports asyncio for itself. Only public asyncio, anyio and sniffio API is used here: private
runtime state changes shape between releases without notice, and a library that reads it
breaks its users' servers on their next Python or anyio upgrade.
"""

from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Awaitable, Coroutine
from typing import Any, TypeVar

import anyio

from ..outcome import Outcome

try:
    from sniffio import current_async_library
except ImportError:  # pragma: no cover - trio requires sniffio: without it only asyncio runs

    def current_async_library() -> str:
        asyncio.get_running_loop()  # raises outside a loop, as sniffio would
        return "asyncio"


T = TypeVar("T")

__all__ = [
    "cancels_the_execution",
    "on_asyncio",
    "protect",
    "shielded",
    "spawn",
    "start_eagerly",
]


def on_asyncio() -> bool:
    """Whether the running async library is asyncio (sniffio's answer, as anyio's own)."""
    return current_async_library() == "asyncio"


def shielded() -> anyio.CancelScope:
    """A scope no anyio cancellation reaches: for the short clean-ups a cancelled call owes."""
    return anyio.CancelScope(shield=True)


def spawn(coro: Coroutine[Any, Any, Any], background: set[asyncio.Task[Any]]) -> bool:
    """Run `coro` in a task of its own on asyncio (kept in `background`, so that it is neither
    collected nor forgotten); False (and `coro` closed) when no asyncio loop runs."""
    try:
        task = asyncio.get_running_loop().create_task(coro)
    except RuntimeError:  # pragma: no cover - trio never cancels natively
        coro.close()
        return False
    background.add(task)
    task.add_done_callback(background.discard)
    return True


def protect(
    body: Coroutine[Any, Any, Outcome], background: set[asyncio.Task[Any]]
) -> Outcome | Awaitable[Outcome]:
    """Run `body` so that nothing cancelling the caller stops it between the tool's side
    effect and its record: a client that cancels or disconnects must not leave a retry to run
    the call again. The outcome itself when the body finished at once, else what to await.

    On asyncio the body runs as a task of its own, kept in `background` while it runs, and
    hands its outcome to a future of its caller's (`_answer`). A cancelled caller cancels only
    that future, whatever cancelled it (anyio, which calls `task.cancel()` underneath, or a
    native cancellation); the task goes on to its record. The same guard as `asyncio.shield`,
    which would wake the caller one loop iteration later. Where Python starts a task eagerly
    (`start_eagerly`), a call that never suspends (a fast tool, MemoryStore) is answered
    without waiting for the event loop at all. Not a coroutine itself, so that such a call
    makes no frame of its own. On trio, which never cancels natively, an anyio shield suffices.
    """
    if not on_asyncio():
        return _shielded(body)
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Outcome] = loop.create_future()
    started = start_eagerly(loop, _answer(body, answer))
    if answer.done():
        return answer.result()  # eagerly, in its first step: no task is left
    if isinstance(started, asyncio.Task):
        background.add(started)
        started.add_done_callback(functools.partial(_ended, background))
    return answer


def _ended(background: set[asyncio.Task[Any]], task: asyncio.Task[Any]) -> None:
    background.discard(task)
    if not task.cancelled():
        task.exception()  # an interrupt its caller saw through `answer`: nothing left to log


async def _answer(body: Coroutine[Any, Any, Outcome], answer: asyncio.Future[Outcome]) -> None:
    """`body`'s outcome, or what it raised, into `answer` (a caller that left cancelled it)."""
    try:
        outcome = await body
    except asyncio.CancelledError:  # this very task cancelled: its loop is tearing down
        answer.cancel()
        raise
    except BaseException as exc:
        if not answer.done():
            answer.set_exception(exc)
        if not isinstance(exc, Exception):
            raise  # an interrupt: the loop's to see too, as from any task
        return
    if not answer.done():
        answer.set_result(outcome)


async def _shielded(body: Coroutine[Any, Any, Outcome]) -> Outcome:
    with shielded():
        outcome = await body
    return outcome


def cancels_the_execution(exc: BaseException) -> bool:
    """Whether `exc`, raised out of a tool, is the cancellation of the execution itself rather
    than something the tool raised (its own `CancelledError` from a future another task
    cancelled, a custom `BaseException`).

    On asyncio, `Task.cancelling()` (3.11+) says whether the running task has a cancellation
    pending: the execution runs in a task of its own behind `asyncio.shield`, so only someone
    cancelling that very task (an event loop tearing down) counts. Python 3.10 has no way to
    tell: there every `CancelledError` counts as the execution's cancellation (not recorded;
    the claim lapses by lease, as if the process had died). On trio the body runs under a
    shield; a `Cancelled` reaching it must propagate to its own scope.
    """
    if isinstance(exc, GeneratorExit):
        return True  # the coroutine is being closed: it must not await anything more
    if not isinstance(exc, anyio.get_cancelled_exc_class()):
        return False
    if not on_asyncio():
        return True
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


# Started the ordinary way, a task's first step waits for the next event loop iteration, and
# a caller waiting on it through `asyncio.shield` is woken two iterations after it ends. Started
# eagerly (`eager_start`, Python 3.12 and later), a call that never suspends is over before
# `start_eagerly` returns, and one that suspends goes on in its task exactly as before. Older
# Pythons have no public way to do this: there the task starts on the next iteration.
if sys.version_info >= (3, 12):

    def start_eagerly(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
    ) -> T | asyncio.Task[T]:
        """What `coro` returned when it finished in its first step, else the task it goes on
        in (its first step already run, as that task, in a copy of the caller's context)."""
        task: asyncio.Task[T] = asyncio.Task(coro, loop=loop, eager_start=True)
        return task.result() if task.done() else task

else:

    def start_eagerly(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
    ) -> T | asyncio.Task[T]:
        """The task `coro` runs in, started on the loop's next iteration (no eager start
        before Python 3.12)."""
        return loop.create_task(coro)
