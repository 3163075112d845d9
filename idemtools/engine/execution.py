"""The one execution of a claimed call: run the tool, then record its outcome (or release the
claim when it has none), with the lease renewed throughout.

Two ways to record, chosen once when the execution starts from its policy and the store
(`Recording.for_policy`), never flagged through:

- `Recording`: the tool runs, then `complete` is tried again for up to `record_retry_for`
  seconds while the store is unreachable; a record that cannot be written is logged, and the
  caller still gets its answer (the claim ends by lease).
- `TransactionalRecording` (`transactional=True` on a `TransactionalStore`): the tool and the
  record share one transaction; anything that keeps the record from committing rolls back
  what the tool wrote, releases the key and answers with an error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from ..errors import OutcomeTooLargeError, StoreUnavailableError
from ..outcome import Outcome
from ..policy import Policy
from ..stores.base import Status
from .decision import failed, key_digest
from .lease_keeper import Lease, LeaseKeeper
from .runtime import cancels_the_execution, spawn
from .store_calls import StoreCalls, original
from .unknown import StillRunning

if TYPE_CHECKING:
    import asyncio

    from ..errors import ErrorCodes, RefusedError
    from .observers import Watch
    from .stats import EngineStats
    from .telemetry import Telemetry

__all__ = ["EngineView", "Execution", "Recording", "TransactionalRecording", "run_tool"]

log = logging.getLogger("idemtools")

Run = Callable[[], Awaitable[Outcome]]


class EngineView(Protocol):
    """What an execution and the lapse rule (`lapse`) read of the engine that runs them;
    `core.Engine` is the one there is. A protocol rather than an import of `core`, which
    imports this module: naming it back, even for annotations only, would draw a circle."""

    stats: EngineStats
    codes: ErrorCodes
    telemetry: Telemetry
    max_outcome_bytes: int
    record_retry_for: float
    _background: set[asyncio.Task[Any]]

    def refusal(self, error: RefusedError) -> Outcome: ...


@dataclass(eq=False, slots=True)
class Execution:
    """One claimed (or about to be claimed) keyed call: what every later step needs."""

    scope: str
    key: str
    fingerprint: str
    owner: str  # unique per execution: fences a stale owner
    policy: Policy
    tool: str
    started: float  # time.time() when the call was decided: how long it has run
    held: Lease | None = None  # the lease keeper's hold on the claim
    obs: Watch | None = None  # the observers' watch, when any listens
    reraise: BaseException | None = None  # an interrupt the tool raised, raised once recorded
    relapse: bool = False  # a taken-over lapsed claim goes back to lapsed (undecided, shut down)


async def run_tool(ex: Execution, run: Run) -> Outcome:
    """The tool's outcome; whatever it raises becomes one (recorded, never run again), except
    the cancellation of the execution itself."""
    try:
        return await run()
    except Exception as exc:  # the adapter's run() should not raise; be safe
        log.exception("tools/call raised inside idemtools key_digest=%s", key_digest(ex.key))
        return Outcome.of_error(-32603, f"internal error: {exc}")
    except BaseException as exc:
        if cancels_the_execution(exc):
            # The execution's own task is being cancelled (an event loop tearing down):
            # no outcome of the tool's. Nothing is recorded; the claim lapses by lease.
            log.error(
                "keyed call cancelled while running key_digest=%s; nothing was recorded, "
                "its claim lapses by lease",
                key_digest(ex.key),
            )
            raise
        # Anything else the tool raised is its outcome: recorded and replayed, never left
        # "in progress" for a lease and then run again. Interrupts are recorded, then
        # raised again once the record is written.
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            ex.reraise = exc
        log.error(
            "tool raised %s key_digest=%s; recorded as the call's error outcome",
            type(exc).__name__,
            key_digest(ex.key),
            exc_info=exc,
        )
        return Outcome.of_error(-32603, f"internal error: the tool raised {type(exc).__name__}")


class Recording:
    """Run the tool, then record its outcome; see the module docstring."""

    __slots__ = ("engine", "keeper", "store")

    def __init__(self, engine: EngineView, store: StoreCalls, keeper: LeaseKeeper) -> None:
        self.engine = engine
        self.store = store
        self.keeper = keeper

    async def execute(self, ex: Execution, run: Run) -> Outcome:
        outcome = await run_tool(ex, run)
        if isinstance(outcome, StillRunning):
            return await self._still_running(ex, outcome)
        try:
            await self.record(ex, outcome)
        except Exception as exc:
            # The caller still gets its answer; the claim ends by lease.
            self.engine.stats.record_failures += 1
            log.error(
                "could not record outcome key_digest=%s: %r", key_digest(ex.key), original(exc)
            )
        return outcome

    async def record(self, ex: Execution, outcome: Outcome) -> bool:
        """Record the outcome (or release the claim of one that is not final); False when
        another execution claimed the key meanwhile (counted and logged here)."""
        held = ex.held
        if held is not None:
            # The tool may have starved the keeper until now. The keeper's own test, done here
            # first: a call that ends within its lease (nearly all) costs no further calls.
            now = time.monotonic()
            if now - held.renewed_at > held.lease:
                self.keeper.check(held, now)
            # From here a renewal may find the record completed: that is no lost claim (the
            # engine itself reports one if `complete` is refused).
            held.claimed = False
        if not outcome.final:
            await self.store.release(ex.scope, ex.key, ex.owner, lapse=ex.relapse)
            self.engine.stats.released += 1
            return True
        data = outcome.to_bytes()
        if len(data) > self.engine.max_outcome_bytes:
            data = self._too_large(ex, len(data))
        try:  # the first attempt inline: nearly every call records at once
            recorded = await self.store.complete(
                ex.scope, ex.key, ex.owner, data, ex.policy.retention, ex.fingerprint
            )
        except StoreUnavailableError as exc:
            recorded = await self._complete_after(ex, data, exc)
        if not recorded:
            # Late completion succeeds whenever nobody else claimed the key, so this
            # means a second execution began while this one ran.
            self.engine.stats.lost_claims += 1
            log.warning(
                "outcome not recorded: another execution claimed the key meanwhile key_digest=%s",
                key_digest(ex.key),
            )
        return recorded

    async def _still_running(self, ex: Execution, unknown: StillRunning) -> Outcome:
        """Record an unknown outcome replaceably and answer it; its real outcome, should it
        come, is recorded in the background by the same owner and replaces it."""
        answer = Outcome(error=unknown.error)
        later = unknown.later
        held = ex.held
        if held is not None:
            held.claimed = False
        try:
            await self.store.complete_unknown(
                ex.scope, ex.key, ex.owner, answer.to_bytes(), ex.policy.retention, ex.fingerprint
            )
        except Exception as exc:
            self.engine.stats.record_failures += 1
            log.error(
                "could not record outcome key_digest=%s: %r", key_digest(ex.key), original(exc)
            )
        if later is not None:
            spawn(self._record_late(ex, later), self.engine._background)
        return answer

    async def _record_late(self, ex: Execution, later: Awaitable[Outcome | None]) -> None:
        try:
            outcome = await later
            if outcome is None or not outcome.final:
                return  # nothing came that ends the call: the unknown record stays
            if await self.record(ex, outcome):
                log.warning(
                    "a late outcome replaced idempotency_outcome_unknown key_digest=%s",
                    key_digest(ex.key),
                )
        except Exception as exc:
            log.error(
                "could not record a late outcome key_digest=%s: %r",
                key_digest(ex.key),
                original(exc),
            )

    def _too_large(self, ex: Execution, size: int) -> bytes:
        """What is recorded in place of an outcome too large to keep: an error saying so."""
        engine = self.engine
        limit = engine.max_outcome_bytes
        log.error(
            "outcome of %d bytes exceeds max_outcome_bytes=%d key_digest=%s; recording "
            "an error in its place",
            size,
            limit,
            key_digest(ex.key),
        )
        return engine.refusal(
            OutcomeTooLargeError(
                f"the original call completed, but its outcome ({size} bytes) "
                f"exceeded the {limit}-byte limit and was not kept; "
                "it will not run again under this key",
                key=ex.key,
            )
        ).to_bytes()

    async def _complete_after(
        self, ex: Execution, data: bytes, failure: StoreUnavailableError
    ) -> bool:
        """`complete` after a first attempt failed with `failure`: tried again for up to
        `record_retry_for` seconds while the store is unreachable. The claim stays renewed
        meanwhile, so a store that comes back (a Redis restart, a database failover) gets the
        record and no retry runs the tool again. The window counts from the first failure:
        reading the clock before every first attempt would cost each call that records at
        once (the async backend is looked up)."""
        deadline: float | None = None
        pause = 0.05
        attempts = 1
        exc: StoreUnavailableError = failure
        while True:
            # A failed attempt may itself have taken the whole window (a timeout): two
            # more follow in any case.
            now = anyio.current_time()
            if deadline is None:
                deadline = now + self.engine.record_retry_for
            if now + pause > deadline and attempts >= 3:
                raise exc
            self.engine.stats.store_errors += 1
            log.warning(
                "recording the outcome failed, trying again key_digest=%s: %r",
                key_digest(ex.key),
                exc.__cause__ if exc.__cause__ else exc,
            )
            await anyio.sleep(pause)
            pause = min(pause * 2, 1.0)
            attempts += 1
            try:
                done = await self.store.complete(
                    ex.scope, ex.key, ex.owner, data, ex.policy.retention, ex.fingerprint
                )
            except StoreUnavailableError as again:
                exc = again
                continue
            if done:
                return True
            # An earlier attempt failed after it had landed (the answer was lost): the
            # record is then ours. Stores answer such a re-sent completion yes; one written
            # before that answers no, and the record is read to tell.
            return await self._recorded_by(ex)

    async def _recorded_by(self, ex: Execution) -> bool:
        """Whether the key's record is completed by this very execution (its owner token)."""
        try:
            record = await self.store.get(ex.scope, ex.key)
        except Exception:
            return False
        return record is not None and record.status is Status.COMPLETED and record.owner == ex.owner


class TransactionalRecording(Recording):
    """The tool and its record in one transaction; see the module docstring."""

    __slots__ = ()

    async def execute(self, ex: Execution, run: Run) -> Outcome:
        store = self.store
        try:
            async with store.execution(ex.scope, ex.key, ex.owner) as writes:
                outcome = await run_tool(ex, run)
                if writes is not None and failed(outcome):
                    # A failed call keeps none of its writes; its error record still commits.
                    await writes.rollback()
                if not await self.record(ex, outcome):
                    raise RuntimeError("claim lost before the transaction committed")
        except Exception as exc:
            # Nothing the tool wrote was committed: say so, and free the key for a retry.
            self.engine.stats.record_failures += 1
            log.error(
                "transaction for key_digest=%s did not commit: %r",
                key_digest(ex.key),
                original(exc),
            )
            try:
                await store.release(ex.scope, ex.key, ex.owner)
            except Exception as release_exc:
                log.error(
                    "could not release key_digest=%s: %r", key_digest(ex.key), original(release_exc)
                )
            refused = StoreUnavailableError(
                "the call's transaction could not be committed; nothing it wrote was kept",
                key=ex.key,
            )
            refused.not_processed = False  # the tool ran: what it did outside is unknown
            return self.engine.refusal(refused)
        return outcome

    async def _complete_after(
        self, ex: Execution, data: bytes, failure: StoreUnavailableError
    ) -> bool:
        # Once: inside the transaction a failure rolls it back, so there is nothing to retry.
        raise failure
