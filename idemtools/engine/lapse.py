"""What a call does when its claim took over a lapsed one, and what a call past its
`max_runtime` answers from then on.

A lapsed claim is an execution that entered the tool and whose end was never recorded: its
process died (or stopped renewing) and its lease ran out. The store keeps it, for the tool's
retention, so that the next claim finds it (`Claim.lapsed`): the retry now holds the key, and
the policy's `on_lapse` decides (see `Policy`):

    "rerun"    run the tool again (SEP-3182's stated limit), logged at ERROR and counted;
    "refuse"   record `idempotency_outcome_unknown` and answer it; nothing runs;
    reconcile  ask the application whether the side effect happened: an `Outcome` is
               recorded and answered, None runs the tool; a reconcile that raises or times
               out is answered `idempotency_outcome_unknown` unrecorded, and the claim goes
               back to lapsed so a later retry asks again. A sync reconcile runs in a worker
               thread, so `reconcile_timeout` bounds it even while it blocks.

Each path ends through the engine's one execution (`Engine._execute`), so it is shielded from
the caller's cancellation, renewed by the lease keeper and recorded like any outcome.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import anyio

from ..outcome import Outcome
from ..policy import LapsedCall, Reconcile
from ..stores.base import Record, Store
from .decision import key_digest
from .store_calls import _takes
from .unknown import outcome_unknown

if TYPE_CHECKING:
    from .execution import EngineView, Execution
    from .lease_keeper import Lease

__all__ = ["lapsed_run", "overrun_writer"]

log = logging.getLogger("idemtools")

Run = Callable[[], Awaitable[Outcome]]

_INTERRUPTED = "an earlier execution of this call was interrupted inside the tool"


def _held_for(lapsed: Record) -> float | None:
    claimed_at = getattr(lapsed, "claimed_at", None)
    lapsed_at = getattr(lapsed, "lapsed_at", None)
    if claimed_at is None or lapsed_at is None:
        return None
    return max(0.0, float(lapsed_at) - float(claimed_at))


def lapsed_run(
    engine: EngineView, ex: Execution, lapsed: Record, arguments: Any, run: Run
) -> tuple[Run, bool]:
    """The `run` the execution uses instead of the tool's, and whether it counts as an
    execution of the tool (a refusal or a reconciled outcome does not)."""
    on_lapse = ex.policy.on_lapse
    kind = on_lapse if isinstance(on_lapse, str) else "reconcile"
    engine.stats.lapsed_claims += 1
    engine.telemetry.lapsed_claim(kind)
    held_for = _held_for(lapsed)
    held = "unknown" if held_for is None else f"{held_for:.3f} s"
    if on_lapse == "rerun":
        engine.stats.lapsed_reruns += 1
        log.error(
            "lapsed claim found: an earlier execution entered the tool and its end was never "
            "recorded (its process died or stopped renewing); on_lapse=rerun runs it again "
            "tool=%s key_digest=%s held_for=%s",
            ex.tool,
            key_digest(ex.key),
            held,
        )
        return run, True
    if on_lapse == "refuse":
        log.error(
            "lapsed claim found; on_lapse=refuse records idempotency_outcome_unknown and runs "
            "nothing tool=%s key_digest=%s held_for=%s",
            ex.tool,
            key_digest(ex.key),
            held,
        )
        unknown = outcome_unknown(ex.key, _INTERRUPTED, codes=engine.codes)

        async def refuse() -> Outcome:
            return unknown

        return refuse, False
    log.warning(
        "lapsed claim found; reconciling before anything runs tool=%s key_digest=%s held_for=%s",
        ex.tool,
        key_digest(ex.key),
        held,
    )
    call = LapsedCall(
        tool=ex.tool,
        arguments=arguments,
        key=ex.key,
        scope=ex.scope,
        claimed_at=getattr(lapsed, "claimed_at", None),
        lapsed_at=getattr(lapsed, "lapsed_at", None),
    )
    reconcile = on_lapse
    timeout = ex.policy.reconcile_timeout

    async def reconciled() -> Outcome:
        try:
            with anyio.fail_after(timeout):
                answer = await _ask(reconcile, call)
            if answer is not None and not isinstance(answer, Outcome):
                raise TypeError(
                    f"reconcile returned a {type(answer).__name__}, not an Outcome or None"
                )
        except Exception as exc:
            # Undecided: nothing runs, nothing is recorded; the claim lapses again at once.
            ex.relapse = True
            log.error(
                "reconcile failed (%r); answered idempotency_outcome_unknown, unrecorded: "
                "the next retry reconciles again tool=%s key_digest=%s",
                exc,
                ex.tool,
                key_digest(ex.key),
            )
            unknown = outcome_unknown(
                ex.key,
                _INTERRUPTED + ", and whether it took effect could not be checked",
                codes=engine.codes,
            )
            return Outcome(error=unknown.error, final=False)
        if answer is None:
            log.warning(
                "reconcile found no effect; running the tool tool=%s key_digest=%s",
                ex.tool,
                key_digest(ex.key),
            )
            engine.stats.executions += 1
            return await run()
        log.warning(
            "reconcile found the effect; its outcome is recorded tool=%s key_digest=%s",
            ex.tool,
            key_digest(ex.key),
        )
        return answer

    return reconciled, False


def _is_async(function: object) -> bool:
    """Whether calling `function` gives a coroutine (an `async def`, a partial of one, an
    object whose `__call__` is one)."""
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None)  # noqa: B004 (the method, not callable())
    )


async def _ask(reconcile: Reconcile, call: LapsedCall) -> object:
    """What `reconcile(call)` answers, under the caller's `fail_after`.

    An async reconcile runs on the event loop: bounded at its awaits (one that blocks the loop
    cannot be interrupted, and holds every other call with it). A sync one runs in a worker
    thread, so the timeout bounds it whatever it does: past it the thread is abandoned (it
    cannot be stopped) and whatever it returns later is discarded. A sync function that
    returns an awaitable has it awaited here, on the loop.
    """
    if _is_async(reconcile):
        answer: object = reconcile(call)
    else:
        answer = await anyio.to_thread.run_sync(reconcile, call, abandon_on_cancel=True)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def overrun_writer(engine: EngineView) -> Callable[[Store, Lease], Coroutine[Any, Any, bool]]:
    """The lease keeper's write past a call's `max_runtime`: `idempotency_outcome_unknown`
    under the call's own owner, replaceable by that owner's real outcome should it end."""

    async def write(store: Store, held: Lease) -> bool:
        ex: Execution | None = held.call  # type: ignore[assignment]
        if ex is None:
            return False
        limit = ex.policy.max_runtime or 0.0
        data = outcome_unknown(
            ex.key,
            f"the call has run past its max_runtime ({limit:g} s) and its end is not known",
            codes=engine.codes,
        ).to_bytes()
        complete: Any = store.complete
        if _takes_replaceable(store):
            return bool(
                await complete(
                    ex.scope,
                    ex.key,
                    ex.owner,
                    data,
                    ex.policy.retention,
                    fingerprint=ex.fingerprint,
                    replaceable=True,
                )
            )
        return bool(
            await complete(
                ex.scope, ex.key, ex.owner, data, ex.policy.retention, fingerprint=ex.fingerprint
            )
        )

    return write


def _takes_replaceable(store: Store) -> bool:
    return _takes(store.complete, "replaceable")
