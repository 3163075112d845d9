"""What the engine tells its observers: per keyed call, each of a list of observers
(`Observer`: telemetry's spans and metrics, the application's `on_outcome` hook); per lease,
the lease keeper's events (`LeaseEvents`).

The engine notifies; it never formats a span or calls a hook itself, and the observers do not
know of each other. The list holds only what was asked for (`observers_of`: no hook, no hook
observer), and a call that no observer listens to (no tracer, no meter, no hook) carries no
observation at all: none of this runs for it.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from ..outcome import Outcome
from ..policy import Policy
from .decision import ToolCall, digest, key_digest
from .lease_keeper import Lease
from .telemetry import OnOutcome, OutcomeContext, Telemetry, outcome_kind

if TYPE_CHECKING:
    from .stats import EngineStats

__all__ = [
    "LeaseEvents",
    "Observer",
    "OutcomeHook",
    "Watch",
    "listening_of",
    "observed",
    "observers_of",
]

log = logging.getLogger("idemtools")


class Watch(Protocol):
    """One keyed call as one observer follows it, from `Observer.begin` to its end."""

    executing: bool
    """Set by the engine when the tool starts: from then the execution, not its caller, ends
    the watch (it goes on when its caller is cancelled)."""

    def detach(self) -> None:
        """Leave the task that began the watch (telemetry: make the span's parent current)."""

    def abandon(self, exc: BaseException) -> None:
        """The call ended without an answer (cancelled before its tool ran)."""

    async def end(self, outcome: Outcome) -> None:
        """The call's answer is known; never raises (an observer must not change it)."""


class Observer(Protocol):
    """What the engine notifies of every keyed call it is listening for."""

    def listening(self) -> bool:
        """Whether a call beginning now would be seen (asked once per call: keep it cheap)."""

    def begin(self, tool: str, key: object, policy: Policy, source: str = "sep") -> Watch:
        """`source`: where the key came from (`sep`, `argument`, `derived`: idemtools.bridges)."""


class OutcomeHook:
    """The application's `on_outcome` hook as an observer: told what every keyed call came to.

    It always listens, so it is in the engine's list only when a hook is given.
    """

    __slots__ = ("hook",)

    def __init__(self, hook: OnOutcome) -> None:
        self.hook = hook

    def listening(self) -> bool:
        return True

    def begin(self, tool: str, key: object, policy: Policy, source: str = "sep") -> _Told:
        return _Told(self.hook, tool, key, policy, source)


class _Told:
    """One call the hook will be told of once its answer is known (never if it has none)."""

    __slots__ = ("executing", "hook", "key", "policy", "source", "start", "tool")

    def __init__(
        self, hook: OnOutcome, tool: str, key: object, policy: Policy, source: str = "sep"
    ) -> None:
        self.hook = hook
        self.source = source
        self.tool = tool
        self.key = key
        self.policy = policy
        self.start = time.perf_counter()
        self.executing = False

    def detach(self) -> None:
        pass

    def abandon(self, exc: BaseException) -> None:
        pass  # no answer, nothing to tell: the hook hears of answers only

    async def end(self, outcome: Outcome) -> None:
        kind, refusal = outcome_kind(outcome, executed=self.executing)
        context = OutcomeContext(
            key_digest=digest(self.key),
            refusal=refusal,
            policy=self.policy,
            outcome=outcome if refusal is None else None,
            duration=time.perf_counter() - self.start,
            key_source=self.source,
        )
        try:
            result = self.hook(self.tool, kind, context)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception(
                "on_outcome hook failed for tool=%r outcome=%s key_digest=%s; the call's "
                "answer is unchanged",
                self.tool,
                kind,
                context.key_digest,
            )


class _Watches:
    """Several watches of one call, told in the order of the engine's list."""

    __slots__ = ("watches",)

    def __init__(self, watches: Sequence[Watch]) -> None:
        self.watches = watches

    @property
    def executing(self) -> bool:
        return self.watches[0].executing

    @executing.setter
    def executing(self, value: bool) -> None:
        for watch in self.watches:
            watch.executing = value

    def detach(self) -> None:
        for watch in self.watches:
            watch.detach()

    def abandon(self, exc: BaseException) -> None:
        for watch in self.watches:
            watch.abandon(exc)

    async def end(self, outcome: Outcome) -> None:
        for watch in self.watches:
            await watch.end(outcome)


def observers_of(telemetry: Telemetry, on_outcome: OnOutcome | None) -> tuple[Observer, ...]:
    """An engine's observers: telemetry, then the hook when there is one (its span is ended
    and counted before the hook runs). No hook, no hook observer: a call pays for none."""
    if on_outcome is None:
        return (telemetry,)
    return (telemetry, OutcomeHook(on_outcome))


def listening_of(observers: Sequence[Observer]) -> Callable[[], bool]:
    """The engine's per-call question "does anything listen?", as cheap as the list allows:
    one observer's own `listening` (no extra frame), else any of them."""
    if len(observers) == 1:
        return observers[0].listening

    def listening() -> bool:
        return any(observer.listening() for observer in observers)

    return listening


async def observed(
    observers: Sequence[Observer],
    call: ToolCall,
    policy: Policy,
    handle: Callable[[Watch], Awaitable[Outcome]],
) -> Outcome:
    """`handle(watch)`, the call watched by every observer that listens, each watch begun in
    the task that awaits this (a span is current there) and ended on every way out: here for
    a call that never ran (a replay, a refusal, a cancellation before the tool), by the
    execution for one that ran (it goes on, and ends it, when its caller is cancelled)."""
    obs: Watch
    if len(observers) == 1:  # it listens: the engine asked
        obs = observers[0].begin(call.name, call.key, policy, call.source)
    else:
        watches = [
            o.begin(call.name, call.key, policy, call.source) for o in observers if o.listening()
        ]
        obs = watches[0] if len(watches) == 1 else _Watches(watches)
    try:
        outcome = await handle(obs)
    except BaseException as exc:
        if not obs.executing:  # else the execution, which goes on, ends the observation
            obs.abandon(exc)
        raise
    finally:
        obs.detach()
    if not obs.executing:
        await obs.end(outcome)
    return outcome


class LeaseEvents:
    """The lease keeper's observer: counts each event in the engine's stats, logs it, and
    tells telemetry of lapses. Called on the keeper's thread (or, for a lapse seen at the
    end of a call, on the caller's)."""

    __slots__ = ("stats", "telemetry")

    def __init__(self, stats: EngineStats, telemetry: Telemetry) -> None:
        self.stats = stats
        self.telemetry = telemetry

    def lost(self, held: Lease) -> None:
        # Another owner holds the key now (a second execution began).
        self.stats.lost_claims += 1
        log.warning("lease lost while running key_digest=%s", key_digest(held.key))

    def lapsed(self, held: Lease, late: float) -> None:
        # The process could not renew in time (see idemtools.engine.lease_keeper).
        self.stats.lease_lapses += 1
        self.telemetry.lease_lapsed()
        log.error(
            "lease lapsed key_digest=%s: renewed %.3f s late (lease %.3f s); another instance "
            "may have claimed the key and run the tool a second time. A tool holding the GIL "
            "in a long C call, a paused process or an unreachable store cannot renew (see "
            "docs/operations.md, Leases)",
            key_digest(held.key),
            late,
            held.lease,
        )

    def overran(self, held: Lease) -> None:
        # The tool runs past its policy's max_runtime (hung?).
        self.stats.max_runtime_exceeded += 1
        log.error(
            "keyed call ran past its max_runtime; idempotency_outcome_unknown is recorded and "
            "retries get it (never a second run); if the tool ends, its outcome replaces it "
            "tool=%s key_digest=%s scope=%s (show or release the key: idemtools keys "
            "show|release)",
            held.tool,
            key_digest(held.key),
            held.scope,
        )

    def renewal_failed(self, held: Lease, exc: BaseException) -> None:
        self.stats.store_errors += 1
        log.warning("lease renewal failed key_digest=%s: %r", key_digest(held.key), exc)
