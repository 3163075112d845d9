"""What the engine tells its observers: telemetry (spans, metrics) and the `on_outcome` hook,
per call, and the lease keeper's events, per lease.

The engine notifies; it never formats a span or calls a hook itself. When nothing listens
(no tracer, no meter, no hook: `Telemetry.listening()`), a call carries no observation at all
and none of this runs.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ..lease_keeper import Lease
from ..outcome import Outcome
from ..policy import Policy
from ..telemetry import Observation, Telemetry
from .decision import ToolCall, key_digest

if TYPE_CHECKING:
    from . import EngineStats

__all__ = ["LeaseEvents", "observed"]

log = logging.getLogger("idemtools")


async def observed(
    telemetry: Telemetry,
    call: ToolCall,
    policy: Policy,
    handle: Callable[[Observation], Awaitable[Outcome]],
) -> Outcome:
    """`handle(observation)`, the observation begun in the task that awaits this (its span is
    current there) and ended on every way out: here for a call that never ran (a replay, a
    refusal, a cancellation before the tool), by the execution for one that ran (it goes on,
    and ends it, when its caller is cancelled)."""
    obs = telemetry.begin(call.name, call.key, policy, call.source)
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
        # The process could not renew in time (see idemtools.lease_keeper).
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
            "keyed call ran past its max_runtime; its claim is no longer renewed and lapses "
            "by lease within %.1f s, after which a retry may run the tool again tool=%s "
            "key_digest=%s scope=%s (show or release the key: idemtools keys show|release)",
            held.lease,
            held.tool,
            key_digest(held.key),
            held.scope,
        )

    def renewal_failed(self, held: Lease, exc: BaseException) -> None:
        self.stats.store_errors += 1
        log.warning("lease renewal failed key_digest=%s: %r", key_digest(held.key), exc)
