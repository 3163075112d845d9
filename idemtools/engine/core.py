"""The engine: strings the decision, the claim and the execution together for each keyed call.

    validate key → policy → scope → fingerprint → claim ─┬─ claimed ──→ execution (lease
                                                         │              renewed, shielded from
                                                         │              cancel) → record/release
                                                         ├─ other fingerprint → conflict
                                                         ├─ in progress       → in_progress
                                                         └─ completed         → replay

The steps live in their own modules (`decision`, `execution`, `store_calls`, `runtime`,
`observers`, `lifecycle`); this one only orders them and keeps the counters.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import anyio

from ..bridges import DERIVED, derived_scope
from ..errors import (
    ConflictError,
    ErrorCodes,
    InProgressError,
    RecordCorruptError,
    RefusedError,
    StoreUnavailableError,
)
from ..outcome import Outcome
from ..policy import DEFAULT_POLICY, Policy, Registry, authorize_call, default_registry
from ..scopes import AuthorizeFn
from ..stores.base import Record, Store
from .decision import (
    ToolCall,
    answer_existing,
    check_key,
    digest,
    fingerprint_of,
    mark_replay,
    new_owner,
    scope_hash,
)
from .execution import Execution, Recording, TransactionalRecording
from .lapse import lapsed_run, overrun_writer
from .lease_keeper import LeaseKeeper
from .lifecycle import Lifecycle
from .observers import LeaseEvents, Watch, listening_of, observed, observers_of
from .runtime import on_asyncio, protect, shielded, spawn
from .stats import EngineStats
from .store_calls import StoreCalls, original, store_kind
from .telemetry import OnOutcome, Telemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["Engine", "EngineStats"]

log = logging.getLogger("idemtools")

_SHUTTING_DOWN = "the server is shutting down; retry this call (it was not run)"
_CLAIM_FAILED = "its claim failed"

Run = Callable[[], Awaitable[Outcome]]


class Engine(Lifecycle):
    """Decides every keyed `tools/call`: run once, replay, or refuse.

    Args:
        store: where records live (see `idemtools.stores`).
        registry: tool name → policy; `default_policy` applies to tools without one, so no
            keyed call to a server that advertises the capability is ever executed twice.
        max_key_length: longest accepted key (the behaviour contract: 255 by default).
        max_outcome_bytes: larger outcomes are answered but not kept; a retry gets
            `idempotency_outcome_too_large` instead of a second execution.
        codes: JSON-RPC error codes per `error.data.type`.
        mark_replays: add `_meta["io.github.idemtools/replayed"] = true` to replayed results.
        max_retry_after: upper bound (seconds) of `retryAfterMs` on in-progress refusals.
        authorize: the check run before every keyed call of a tool whose policy has none.
        on_outcome: `hook(tool, kind, context)`, sync or async, told what every keyed call came
            to (`idemtools.engine.telemetry.OutcomeContext`); what it raises is logged, never
            answered.
        tracer_provider: the OpenTelemetry tracer provider to use instead of the global one
            (see `idemtools.engine.telemetry`).
        meter_provider: the meter provider to use instead of the global one.
    """

    def __init__(
        self,
        store: Store,
        *,
        registry: Registry | None = None,
        default_policy: Policy = DEFAULT_POLICY,
        max_key_length: int = 255,
        max_outcome_bytes: int = 1 << 20,
        codes: ErrorCodes | None = None,
        mark_replays: bool = False,
        max_retry_after: float = 1.0,
        authorize: AuthorizeFn | None = None,
        on_outcome: OnOutcome | None = None,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.store = store
        self.authorize = authorize
        self.max_retry_after = max_retry_after
        self.registry = registry if registry is not None else default_registry
        self.default_policy = default_policy
        self.max_key_length = max_key_length
        self.max_outcome_bytes = max_outcome_bytes
        self.codes = codes if codes is not None else ErrorCodes()
        self.mark_replays = mark_replays
        self.stats = EngineStats()
        self.release_retry_delay = 1.0
        self.record_retry_for = 5.0
        self.telemetry = Telemetry(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            store_name=store_kind(store)[0],
            digest=digest,
        )
        # Who hears of each keyed call: telemetry, and the hook's observer only if one is given.
        self._observers = observers_of(self.telemetry, on_outcome)
        self._listening = listening_of(self._observers)
        self._wire(store)
        self._init_lifecycle()

    def _wire(self, store: Store) -> None:
        # How an execution reaches the store, records its outcome and keeps its lease.
        self._calls = StoreCalls(store, self.telemetry, self.stats)
        events = LeaseEvents(self.stats, self.telemetry)
        self.keeper = LeaseKeeper(
            store,
            on_lost=events.lost,
            on_error=events.renewal_failed,
            on_lapse=events.lapsed,
            timed=self.telemetry.timed,
            on_overrun=events.overran,
            record_unknown=overrun_writer(self),
        )
        # How an execution records its outcome, decided per policy when it starts.
        self._recording = Recording(self, self._calls, self.keeper)
        self._in_transaction: Recording = (
            TransactionalRecording(self, self._calls, self.keeper)
            if self._calls.transactional
            else self._recording
        )

    def use_store(self, store: Store) -> None:
        """Swap the store before the first call: the default one, chosen when the server
        learns the transport it serves (see `idemtools.stores.default`)."""
        self.store = store
        self.telemetry.store_name = store_kind(store)[0]
        self._wire(store)

    # -- decisions ---------------------------------------------------------------------------

    def policy_for(self, name: str, own: Policy | None = None, *, by_name: bool = True) -> Policy:
        """The policy for a tool: `declared_policy`, else the server default."""
        if own is None:  # `declared_policy` inline: high-level adapters ask this per keyed call
            own = self.registry.get(name) if by_name else self.registry.declared(name)
        return own or self.default_policy

    def declared_policy(
        self, name: str, own: Policy | None = None, *, by_name: bool = True
    ) -> Policy | None:
        """A tool's declared policy, or None when the server default applies.

        `own` is the `@idempotent` policy the adapter found on the tool's function. Without one,
        a server that can only name its tools (`by_name`: the low-level ones) asks the registry
        by name. A server that holds its tools' functions (`by_name=False`) takes only a name
        declared as such (`Registry.declared`): a bare `@idempotent` function elsewhere in the
        process that merely shares the tool's name lends it nothing.
        """
        if own is not None:
            return own
        return self.registry.get(name) if by_name else self.registry.declared(name)

    def refusal(self, error: RefusedError) -> Outcome:
        """The JSON-RPC error outcome for a refusal; `data.type` tells clients which one."""
        return Outcome.of_error(self.codes.code_for(error.type), error.message, error.data)

    def check_key(self, key: object) -> str:
        return check_key(key, self.max_key_length)

    def handle(self, call: ToolCall, run: Run) -> Awaitable[Outcome]:
        """Run `run()` at most once per (scope, key); otherwise replay or refuse."""
        # Not a coroutine itself: when nothing observes calls, no extra frame per call.
        if self._listening():
            return observed(
                self._observers,
                call,
                self.policy_for(call.name, call.policy),
                functools.partial(self._handle, call, run),
            )
        return self._handle(call, run, None)

    async def _handle(self, call: ToolCall, run: Run, obs: Watch | None) -> Outcome:
        try:
            if self._closing:
                raise StoreUnavailableError(_SHUTTING_DOWN, key=call.key)
            key = call.key
            if not isinstance(key, str) or not 1 <= len(key) <= self.max_key_length:
                key = check_key(key, self.max_key_length)  # raises: its test, inline above
            policy = call.policy or self.registry.get(call.name) or self.default_policy
            check = policy.authorize or self.authorize
            if check is not None:  # before any record is read: a replay is no bypass
                await authorize_call(check, call.context, key)
            scope = scope_hash(policy, call.context, key)
            if call.source == DERIVED:  # a namespace no client-sent key reaches
                scope = derived_scope(scope)
            fp = fingerprint_of(call, key)
            now = time.time()
            owner = new_owner(now)
            execution = Execution(scope, key, fp, owner, policy, call.name, now, None, obs)
            # The claim, its common path inline (no frame of its own per call; its other
            # outcomes are the methods after `_answer_existing`).
            held = execution.held = self.keeper.hold(
                scope, key, owner, policy.lease, policy.max_runtime, call.name, execution
            )
            self._executing.add(execution)
            try:
                claim = await self._calls.claim(
                    scope, key, fp, owner, policy.lease, policy.retention
                )
            except BaseException as exc:
                await self._claim_failed(execution, exc)
                raise
            if not claim.claimed:
                await self._not_claimed(execution)
                if claim.existing is None:  # a store bug, not a client error
                    raise RecordCorruptError("store answered neither claimed nor a record", key=key)
                return self._answer_existing(claim.existing, key, fp, policy)
            held.claimed = True
            if self._closing:
                await self._claimed_while_closing(execution, claim.lapsed is not None)
            lapsed = claim.lapsed
            if lapsed is not None:  # an earlier execution's end was never recorded
                run, counted = lapsed_run(self, execution, lapsed, call.arguments, run)
                if not counted:
                    self.stats.executions -= 1  # `_execute` counts it; this one is no run

        except RefusedError as exc:
            self.stats.refusals += 1
            log.info(
                "idempotency refusal %s key_digest=%s key_source=%s",
                exc.type,
                digest(call.key),
                call.source,
            )
            return self.refusal(exc)
        started = self._execute(execution, run)
        if isinstance(started, Outcome):  # finished at once (see `runtime.protect`)
            return started
        return await started

    def _answer_existing(self, record: Record, key: str, fp: str, policy: Policy) -> Outcome:
        try:
            outcome = answer_existing(record, key, fp, policy, self.max_retry_after)
        except ConflictError:
            self.stats.conflicts += 1
            raise
        except InProgressError:
            self.stats.in_progress += 1
            raise
        self.stats.replays += 1
        return mark_replay(outcome) if self.mark_replays else outcome

    # -- the claim -------------------------------------------------------------------------------

    # The claim's common path is inline in `_handle`: the keeper holds the lease from before
    # the claim is sent (if this event loop blocks between the claim landing and the engine
    # seeing the answer, it is renewed anyway), and the execution counts from there, so that
    # `drain()` waits for a claim still on its way to the store (and the store is not closed
    # under its answer). What follows are its other outcomes.
    #
    # A caller cancelled while the claim is on its way to the store must not leave the key "in
    # progress" for a whole lease while nothing runs. No shield on this path (an anyio cancel
    # scope on every keyed call would cost more than this rare clean-up): whatever cancels
    # the caller — anyio (how the SDKs cancel a request: the client's
    # `notifications/cancelled`, a dropped connection) or a native `task.cancel()` — the
    # claim may or may not have reached the store, so it is
    # released after the fact, fenced by the owner token so that it can never free anyone
    # else's claim: on asyncio from a background task (once more a moment later, in case the
    # claim was still in flight), on trio inline under a shield.

    async def _claim_failed(self, ex: Execution, exc: BaseException) -> None:
        """The claim raised `exc` (re-raised by the caller): undo what may have landed."""
        assert ex.held is not None
        self.keeper.drop(ex.held)
        if isinstance(exc, Exception):
            try:
                if isinstance(exc, StoreUnavailableError):
                    # The store may have applied the claim and lost only its answer (a
                    # timeout, a connection that broke on the way back): release it, fenced
                    # by owner, so that the key does not read "in progress" for a lease while
                    # nothing runs.
                    await self._release_after_failure(ex)
            finally:
                if self._ended_now(ex):
                    with shielded():
                        await self._close_later()
            return
        # cancelled (asyncio.CancelledError, trio.Cancelled)
        if on_asyncio():
            self._release_later(ex)
        else:
            with shielded():
                await self._release_quietly(ex)
        if self._ended_now(ex):
            with shielded():
                await self._close_later()

    async def _not_claimed(self, ex: Execution) -> None:
        """The key has a record already: nothing of this call's to renew or wait for."""
        assert ex.held is not None
        self.keeper.drop(ex.held)
        self._executing.discard(ex)
        if self._closing:
            await self._ended(ex)

    async def _claimed_while_closing(self, ex: Execution, took_over: bool) -> None:
        """Claimed after closing began: not run. Released (fenced by owner) before the store
        may close, and refused like any call that arrives during shutdown. A claim that took a
        lapsed one over gives it back as lapsed: deleted, it would let the next retry run the
        tool again whatever its `on_lapse` says."""
        assert ex.held is not None
        ex.relapse = took_over
        self.keeper.drop(ex.held)
        with shielded():
            await self._release_quietly(ex, why="the server is shutting down")
            await self._ended(ex)
        raise StoreUnavailableError(_SHUTTING_DOWN, key=ex.key)

    async def _release_after_failure(self, ex: Execution) -> None:
        """Release a claim the store may have applied although it raised: inline, so that the
        refused caller's retry finds the key free, bounded (a store that is down answers the
        release no better); once more later from the background on asyncio, in case the claim
        was still on its way (a timeout) or the store was away a moment."""
        released = False
        try:
            with anyio.move_on_after(self.release_retry_delay):
                released = await self._release_quietly(ex, why=_CLAIM_FAILED)
        finally:
            if not released and on_asyncio():
                self._release_later(ex, tried=True, why=_CLAIM_FAILED)

    def _release_later(
        self, ex: Execution, *, tried: bool = False, why: str = "cancellation"
    ) -> None:
        """From a background task: now and once more a moment later, or (`tried`: a first try
        was made inline) only the later one."""
        spawn(self._release_quietly(ex, again=True, skip_first=tried, why=why), self._background)

    async def _release_quietly(
        self,
        ex: Execution,
        *,
        again: bool = False,
        skip_first: bool = False,
        why: str = "cancellation",
    ) -> bool:
        """Release a claim whose call will not run; `again`: the claim may still be in flight
        to the store, so one more try follows a moment later if the first found nothing.
        True when this released it."""
        for attempt in range(2 if again else 1):
            if attempt:
                await anyio.sleep(self.release_retry_delay)
                if self._closed:
                    return False  # the store is gone; the claim, if it landed, lapses by lease
            elif skip_first:
                continue
            try:
                if await self._calls.release(ex.scope, ex.key, ex.owner, lapse=ex.relapse):
                    self.stats.released += 1
                    log.info("claim released after %s key_digest=%s", why, digest(ex.key))
                    return True
            except Exception as exc:
                # After a failed claim the store is most likely still away: that failure was
                # counted and logged once already; this best-effort undo adds only an INFO.
                if why != _CLAIM_FAILED:
                    self.stats.store_errors += 1
                log.log(
                    logging.INFO if why == _CLAIM_FAILED else logging.WARNING,
                    "could not release a claim after %s key_digest=%s: %r",
                    why,
                    digest(ex.key),
                    original(exc),
                )
                if not again:
                    return False
        return False

    # -- the one execution ----------------------------------------------------------------------

    def _execute(self, ex: Execution, run: Run) -> Outcome | Awaitable[Outcome]:
        self.stats.executions += 1
        if ex.obs is not None:
            ex.obs.executing = True  # from here the execution, not its caller, ends it
        # A client that cancels or disconnects must not stop the call between its side effect
        # and its record, or the retry would run it again (see `runtime.protect`).
        return protect(self._execute_body(ex, run), self._background)

    async def _execute_body(self, ex: Execution, run: Run) -> Outcome:
        # The lease keeper renews the claim, off this event loop, from the claim (see `_handle`)
        # until the outcome is recorded (a record written after a store outage included).
        held = ex.held
        try:
            recording = self._in_transaction if ex.policy.transactional else self._recording
            outcome = await recording.execute(ex, run)
            if ex.obs is not None:  # in the shielded body: a caller that left is still told
                await ex.obs.end(outcome)
            if ex.reraise is not None:
                raise ex.reraise
            return outcome
        finally:
            if held is not None:
                self.keeper.drop(held)
            self._executing.discard(ex)
            if self._closing:
                await self._ended(ex)
