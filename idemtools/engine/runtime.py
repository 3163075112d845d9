"""What differs between asyncio and trio, in one place: how an execution is shielded from its
caller's cancellation, how background work is started, and the eager start of an execution's
task on asyncio (the one place idemtools touches private asyncio API).

The rest of the engine asks `on_asyncio()` or calls `protect`, `spawn`, `shielded`; it never
imports asyncio for itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import types
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any

import anyio

from ..outcome import Outcome

try:  # trio depends on sniffio; without it, anyio's only other backend (asyncio) is running
    from sniffio import current_async_library as _current_async_library
    from sniffio import current_async_library_cvar as _library_cvar
    from sniffio import thread_local as _library_thread
except ImportError:  # pragma: no cover
    _library_thread = _library_cvar = None  # type: ignore[assignment]

    def _current_async_library() -> str:
        return "asyncio"


try:  # anyio's asyncio bookkeeping, read by `cancel_pending` (see there)
    from anyio._backends._asyncio import CancelScope as _AsyncioScope
    from anyio._backends._asyncio import _task_states
except ImportError:  # pragma: no cover - another anyio: `cancel_pending` always says "ask"
    _task_states = None  # type: ignore[assignment]
else:
    if not all(
        hasattr(_AsyncioScope(), name) for name in ("_cancel_called", "_shield", "_parent_scope")
    ) or not isinstance(getattr(_task_states, "data", None), dict):  # pragma: no cover
        _task_states = None  # type: ignore[assignment]


# 3.11's `asyncio.current_task` is a Python function around this table: read it directly.
_TASKS: dict[Any, asyncio.Task[Any]] | None = getattr(asyncio.tasks, "_current_tasks", None)
if sys.version_info >= (3, 12) or not isinstance(_TASKS, dict):
    _TASKS = None

__all__ = [
    "Workers",
    "cancel_pending",
    "cancels_the_execution",
    "on_asyncio",
    "protect",
    "shielded",
    "spawn",
]


def on_asyncio() -> bool:
    """Whether the running library is asyncio, as sniffio says; asked on every keyed call, so
    sniffio's own steps are inlined (its asyncio step imports asyncio again on every call)."""
    if _library_thread is not None and _library_cvar is not None:
        name = _library_thread.name
        if name is None:
            name = _library_cvar.get()
        if name is not None:
            return bool(name == "asyncio")
        if _TASKS is not None:  # 3.11: `current_task`'s table, read directly
            loop = asyncio.events._get_running_loop()
            if loop is not None and _TASKS.get(loop) is not None:
                return True
        else:
            try:
                if asyncio.current_task() is not None:
                    return True
            except RuntimeError:
                pass
    return _current_async_library() == "asyncio"


def cancel_pending() -> bool:
    """False when no anyio scope around the running task has been cancelled (no shield in
    between); True when one has, or when this cannot be told cheaply (trio, another anyio).

    An adapter calls `anyio.lowlevel.checkpoint_if_cancelled()` after the engine answers (a
    client that cancelled already got its answer from the SDK), and only when this says True.
    The same walk as anyio's own asyncio `checkpoint_if_cancelled`, without its backend lookup
    and coroutine: ~16 k instructions per keyed call there, ~5 k here (callgrind). Only reads
    anyio's per-task state; when its shape is not the one checked at import, or the loop is
    not asyncio, the answer is True and the real checkpoint decides, exactly as before.
    """
    states = _task_states
    if states is None or not on_asyncio():
        return True
    tasks = _TASKS
    task = tasks.get(asyncio.get_running_loop()) if tasks is not None else asyncio.current_task()
    # `WeakKeyDictionary.get`, inline (its table is `data`, keyed by weak references).
    table: dict[Any, Any] = states.data  # type: ignore[attr-defined]
    state = table.get(weakref.ref(task)) if task is not None else None
    if state is None:
        return False  # no anyio scope: anyio's checkpoint_if_cancelled returns at once too
    scope = state.cancel_scope
    while scope is not None:
        if scope._cancel_called:
            return True
        if scope._shield:
            return False
        scope = scope._parent_scope
    return False


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


def protect(body: Coroutine[Any, Any, Outcome], workers: Workers) -> Outcome | Awaitable[Outcome]:
    """Run `body` so that nothing cancelling the caller stops it between the tool's side
    effect and its record: a client that cancels or disconnects must not leave a retry to run
    the call again. The outcome itself when the body finished at once, else what to await.

    On asyncio the body runs as a task of its own (one of `workers`), and a caller that
    suspends waits on it behind `asyncio.shield`, which holds off every cancellation of the
    caller, anyio's (a `task.cancel()` underneath) and native ones alike; an anyio shield on
    top would cost ~9 us per call and add nothing. A cancelled caller stops waiting; the call
    goes on to its record. The body's first step runs at once, as that task (`Workers.start`):
    a call that finishes without suspending (a fast tool, MemoryStore) is answered without
    waiting for the event loop. Not a coroutine itself: no frame of its own per call. On trio,
    which never cancels natively, an anyio shield suffices.
    """
    if on_asyncio():
        started = workers.start(asyncio.get_running_loop(), body)
        if isinstance(started, asyncio.Future):
            return asyncio.shield(started)
        return started
    return _shielded(body)


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


# -- eager start of an execution's task ----------------------------------------------------------
#
# Started the ordinary way, an execution's task's first step waits for the next event loop
# iteration, and its caller, waiting on it through `asyncio.shield`, is woken two iterations
# after it ends: three loop iterations and a shield per call, ~7 % of a bare in-memory round
# trip (docs/benchmarks.md). Started eagerly, a call that never suspends (a fast tool and
# MemoryStore) is over before `start_eagerly` returns; one that suspends goes on in its task
# exactly as before. Python 3.12 does this natively (`eager_start`); on 3.11, `_start_eagerly_311`
# does the same by hand, through the private `asyncio.tasks._enter_task` / `_leave_task`
# (`_TaskSwitch`, checked when this module is imported); 3.10 starts it lazily.


class _TaskSwitch:
    """The private asyncio functions that make a task the current one (Python 3.11 only).

    Looked up once, when this module is imported: a Python whose asyncio lacks them fails
    here, loudly, naming them, rather than running executions in the wrong task."""

    __slots__ = ("current", "enter", "leave")

    def __init__(self) -> None:
        enter = getattr(asyncio.tasks, "_enter_task", None)
        leave = getattr(asyncio.tasks, "_leave_task", None)
        if not callable(enter) or not callable(leave):
            missing = [
                name
                for name, found in (("_enter_task", enter), ("_leave_task", leave))
                if not callable(found)
            ]
            raise ImportError(
                "idemtools needs asyncio.tasks."
                + " and asyncio.tasks.".join(missing)
                + f" on Python {sys.version_info.major}.{sys.version_info.minor} (the eager "
                "start of an execution's task); this Python's asyncio has none"
            )
        self.enter: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] = enter
        self.leave: Callable[[asyncio.AbstractEventLoop, asyncio.Task[Any]], None] = leave
        # The loop → current task table itself (`_TASKS`), else `current_task`.
        self.current: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
            _TASKS.get if _TASKS is not None else asyncio.current_task
        )


class _FirstStep:
    """What an execution's first step, run before its task's own first step, left behind."""

    __slots__ = ("coro", "finished", "outcome", "waiting_on")

    def __init__(self, coro: Coroutine[Any, Any, Outcome]) -> None:
        self.coro = coro
        self.finished = False
        self.outcome: Outcome | None = None
        self.waiting_on: Any = None  # what the coroutine yielded: a future, or None


async def _carry_on(step: _FirstStep) -> Outcome | None:
    # The task's own first step: nothing left to do, or wait where the first step stopped.
    if step.finished:
        return step.outcome
    return await _resume(step.coro, step.waiting_on)


@types.coroutine
def _resume(
    coro: Coroutine[Any, Any, Outcome], waiting_on: Any, context: contextvars.Context | None = None
) -> Generator[Any, None, Outcome]:
    """Go on driving a coroutine that already yielded `waiting_on`, exactly as `await` would:
    the task waits on that first (a future or a bare checkpoint), then on whatever follows.
    With `context`, each step runs in it (a worker carrying an execution on, `Workers`);
    without, in the task's own."""
    while True:
        try:
            yield waiting_on
        except GeneratorExit:  # the task is destroyed unfinished (its loop closed)
            coro.close()
            raise
        except BaseException as exc:  # thrown into the task (a cancellation): pass it on
            step: Callable[[Any], Any] = coro.throw
            value: Any = exc
        else:
            step, value = coro.send, None
        try:
            waiting_on = step(value) if context is None else context.run(step, value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


def _start_eagerly_311(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome]
) -> Outcome | asyncio.Task[Any]:
    """The outcome when `coro` finished in its first step, else the task it goes on in.

    3.12's eager start, by hand: the task is created first, and made the current task (in its
    own context) while the coroutine's first step runs here, so whatever binds to the current
    task during that step (an anyio cancel scope, `asyncio.timeout`) binds to the task that
    carries on, never to the caller.
    """
    switch = _switch
    assert switch is not None
    step = _FirstStep(coro)
    context = contextvars.copy_context()
    task = loop.create_task(_carry_on(step), context=context)  # type: ignore[call-arg,unused-ignore]
    caller = asyncio.current_task(loop)
    if caller is not None:
        switch.leave(loop, caller)
    switch.enter(loop, task)
    try:
        step.waiting_on = context.run(coro.send, None)
    except StopIteration as stop:
        step.finished, step.outcome = True, stop.value
    except BaseException:
        step.finished = True  # the task then ends at once; the exception is the caller's
        raise
    finally:
        switch.leave(loop, task)
        if caller is not None:
            switch.enter(loop, caller)
    return step.outcome if step.finished and step.outcome is not None else task


def _start_eagerly_312(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome]
) -> Outcome | asyncio.Task[Any]:
    task: asyncio.Task[Outcome] = asyncio.Task(  # type: ignore[call-arg,unused-ignore]
        coro, loop=loop, eager_start=True
    )
    return task.result() if task.done() else task


def _start_lazily(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome]
) -> Outcome | asyncio.Task[Any]:
    return loop.create_task(coro)  # 3.10: `create_task` takes no context to step it in


_switch: _TaskSwitch | None = None
if sys.version_info >= (3, 12):
    start_eagerly = _start_eagerly_312
elif sys.version_info >= (3, 11):
    _switch = _TaskSwitch()
    start_eagerly = _start_eagerly_311
else:  # pragma: no cover
    start_eagerly = _start_lazily


# -- the tasks executions run as (asyncio) -------------------------------------------------------
#
# An execution must run as a task of its own (see `protect`), and its first step at once (see
# the eager start above). Creating that task per call is most of what `protect` costs: the
# `Task` itself, its registration, the `Handle` its scheduled step needs, and that step, run on
# the next loop iteration although the call finished long before (3.11; ~20 k instructions, a
# tenth of what idemtools adds to a first execution). So executions run as *workers*: tasks
# that wait, idle, on a future of their own. The first step of an execution runs as an idle
# worker (made the current task for it, in the execution's own copy of the context); a step
# that finishes leaves the worker idle and untouched, for the next call. Only an execution
# that suspends wakes its worker, which then carries the coroutine on (in that same context)
# and goes back to idle when it ends; the next call takes another worker, made when needed.
# Python 3.12's native eager start never schedules a task that finished and costs the same as
# a worker (callgrind), so 3.12+ uses it; 3.10 creates the task lazily, as before.


class _Job:
    """An execution that suspended in its first step: what its worker carries on."""

    __slots__ = ("context", "coro", "future", "waiting_on")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Outcome],
        context: contextvars.Context,
        waiting_on: Any,
        future: asyncio.Future[Outcome],
    ) -> None:
        self.coro = coro
        self.context = context
        self.waiting_on = waiting_on
        self.future = future


class _Worker:
    __slots__ = ("task", "wake")

    def __init__(self, workers: Workers, loop: asyncio.AbstractEventLoop) -> None:
        self.wake: asyncio.Future[_Job] = loop.create_future()
        # An empty context: a worker holds nothing of the call that happened to create it.
        self.task: asyncio.Task[None] = loop.create_task(
            workers.serve(self),
            name="idemtools-execution",
            context=contextvars.Context(),  # type: ignore[call-arg,unused-ignore]
        )
        # An idle worker on a loop closed without cancelling its tasks is no lost work.
        self.task._log_destroy_pending = False  # type: ignore[attr-defined]
        self.task.add_done_callback(_retrieved)


class Workers:
    """One engine's execution tasks on asyncio: the idle ones of the loop it runs on, and
    `background`, the tasks that outlive their caller (busy workers and the engine's own
    clean-ups), held here so that they are neither collected nor forgotten.

    Kept per engine, not per process: idle workers hold their loop, and go with the engine.
    """

    __slots__ = ("_idle", "background")

    def __init__(self, background: set[asyncio.Task[Any]]) -> None:
        self.background = background
        # (loop, its idle workers), replaced as one value: an engine whose calls come from
        # another loop (a test's next one, another thread's) never hands one loop's worker
        # to the other.
        self._idle: tuple[asyncio.AbstractEventLoop | None, list[_Worker]] = (None, [])

    def start(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome]
    ) -> Outcome | asyncio.Future[Outcome]:
        """The outcome when `coro` finished in its first step, else a future of it."""
        switch = _switch
        if switch is None:  # 3.12+: the native eager start costs the same; 3.10: lazily
            started = start_eagerly(loop, coro)
            if isinstance(started, asyncio.Task):
                self.background.add(started)
                started.add_done_callback(self.background.discard)
            return started
        on, idle = self._idle
        if on is not loop:  # another loop: its own workers
            idle = []
            self._idle = (loop, idle)
        worker = idle.pop() if idle else _Worker(self, loop)
        context = contextvars.copy_context()
        caller = switch.current(loop)
        if caller is not None:
            switch.leave(loop, caller)
        switch.enter(loop, worker.task)
        try:
            waiting_on = context.run(coro.send, None)
        except StopIteration as stop:
            idle.append(worker)
            return stop.value  # type: ignore[no-any-return]
        except BaseException:
            idle.append(worker)  # the step raised (an interrupt): the caller's to see
            raise
        finally:
            switch.leave(loop, worker.task)
            if caller is not None:
                switch.enter(loop, caller)
        future: asyncio.Future[Outcome] = loop.create_future()
        self.background.add(worker.task)  # busy: it may outlive its caller
        worker.wake.set_result(_Job(coro, context, waiting_on, future))
        return future

    async def serve(self, worker: _Worker) -> None:
        """A worker's life: wait idle; carry on an execution that suspended in it; again.

        No `finally`: a worker destroyed idle (its loop closed without cancelling it) runs no
        code of its own while the garbage collector finalizes it."""
        while True:
            try:
                job = await worker.wake
            except asyncio.CancelledError:  # its loop tearing down
                with contextlib.suppress(ValueError):
                    self._idle[1].remove(worker)
                wake = worker.wake
                if wake.done() and not wake.cancelled():
                    # Woken with an execution, then cancelled before its first step here:
                    # pass the cancellation to the execution rather than drop it unfinished.
                    _cancel_job(wake.result())
                raise
            try:
                outcome = await _resume(job.coro, job.waiting_on, job.context)
            except BaseException as exc:
                # An interrupt, or this task cancelled (its loop tearing down): the end of
                # this worker; the waiting caller sees the same.
                self.background.discard(worker.task)
                if isinstance(exc, asyncio.CancelledError):
                    job.future.cancel()
                else:
                    job.future.set_exception(exc)
                raise
            self.background.discard(worker.task)
            job.future.set_result(outcome)
            loop = worker.task.get_loop()
            worker.wake = loop.create_future()
            on, idle = self._idle
            if on is not loop:
                return  # the engine moved to another loop meanwhile
            idle.append(worker)


def _cancel_job(job: _Job) -> None:
    job.future.cancel()
    with contextlib.suppress(BaseException):
        job.context.run(job.coro.throw, asyncio.CancelledError())
    job.coro.close()


def _retrieved(task: asyncio.Task[None]) -> None:
    # A worker ends with what ended its execution (an interrupt, re-raised to its loop as any
    # task's is): its caller saw it through the execution's future; nothing is left to log.
    if not task.cancelled():
        task.exception()
