"""The SEP-3182 state machine, free of any transport or SDK.

    validate key → policy → scope → fingerprint → claim ─┬─ claimed ──→ run (lease renewed,
                                                         │              shielded from cancel)
                                                         │              → complete / release
                                                         ├─ other fingerprint → conflict
                                                         ├─ in progress       → in_progress
                                                         └─ completed         → replay

Adapters give the engine a `ToolCall` and an async `run()` that performs the SDK's ordinary
`tools/call` handling and returns its `Outcome`; they send back whatever outcome the engine
returns. Refusals come back as error outcomes carrying `error.data.type`, never as exceptions,
so no adapter can forget to translate one. The engine never imports an adapter or a store.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import math
import os
import sys
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .canonical import CanonicalizationError, fingerprint
from .errors import (
    ArgumentsInvalidError,
    ConflictError,
    ErrorCodes,
    InProgressError,
    KeyInvalidError,
    OutcomeTooLargeError,
    RecordCorruptError,
    RefusedError,
    ScopeUnavailableError,
    StoreFullError,
    StoreUnavailableError,
)
from .lease_keeper import Lease, LeaseKeeper
from .outcome import Outcome
from .policy import DEFAULT_POLICY, Policy, Registry, authorize_call, default_registry
from .redaction import redact_url
from .scopes import AuthorizeFn, CallContext
from .stores.base import Claim, Record, Status, Store, TransactionalStore
from .telemetry import Observation, OnOutcome, Telemetry

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

try:  # trio depends on sniffio; without it, anyio's only other backend (asyncio) is running
    from sniffio import current_async_library as _current_async_library
except ImportError:  # pragma: no cover

    def _current_async_library() -> str:
        return "asyncio"


__all__ = ["REPLAY_META_KEY", "Engine", "EngineStats", "ToolCall", "key_digest"]

log = logging.getLogger("idemtools")

_SHUTTING_DOWN = "the server is shutting down; retry this call (it was not run)"

REPLAY_META_KEY = "io.github.idemtools/replayed"
"""The `_meta` key of the opt-in replay marker on replayed results."""


def new_owner(now: float) -> str:
    """A fresh owner token: 32 lowercase hex digits, unique per execution (80 random bits),
    whose first 12 are the claim's wall-clock time in milliseconds, so that an operator
    looking at a record (`idemtools keys show`) sees how long ago it was claimed. Stores treat
    owners as opaque strings."""
    global _owner_prefix
    ms = int(now * 1000)
    cached = _owner_prefix
    if cached[0] != ms:  # formatted once per millisecond, not per call (hot path)
        cached = _owner_prefix = (ms, f"{ms:012x}")
    return cached[1] + os.urandom(10).hex()


_owner_prefix: tuple[int, str] = (-1, "")


def claimed_at(owner: str) -> float | None:
    """The claim time (seconds since the epoch) an owner token from `new_owner` carries, or
    None for a token of another shape (written by another release, or by hand)."""
    if len(owner) != 32:
        return None
    try:
        ms = int(owner[:12], 16)
    except ValueError:
        return None
    return ms / 1000 if 1_500_000_000_000 <= ms <= 10_000_000_000_000 else None


_CLAIM_FAILED = "its claim failed"


def key_digest(key: str) -> str:
    """A short hash of a key, for logs: keys are client data and may carry meaning."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class ToolCall:
    """One keyed `tools/call`, as the adapter saw it in dispatch.

    `key` is whatever the client sent (validated here). `policy` is the tool's own policy when
    the adapter found one on the tool function; otherwise the registry and default apply.
    """

    name: str
    arguments: Mapping[str, Any] | None
    key: object
    context: CallContext = field(default_factory=CallContext)
    policy: Policy | None = None


@dataclass
class EngineStats:
    """Counters an operator can export; plain ints, no metrics library imposed."""

    executions: int = 0
    replays: int = 0
    conflicts: int = 0
    in_progress: int = 0
    refusals: int = 0
    store_errors: int = 0
    record_failures: int = 0
    lost_claims: int = 0
    released: int = 0
    lease_lapses: int = 0  # renewals or completions later than the lease allowed (ERROR logged)
    max_runtime_exceeded: int = 0


class Engine:
    """Decides every keyed `tools/call`: run once, replay, or refuse.

    Args:
        store: where records live (see `idemtools.stores`).
        registry: tool name → policy; `default_policy` applies to tools without one, so no
            keyed call to a server that advertises the capability is ever executed twice.
        max_key_length: longest accepted key (semantics.md: 255 by default).
        max_outcome_bytes: larger outcomes are answered but not kept; a retry gets
            `idempotency_outcome_too_large` instead of a second execution.
        codes: JSON-RPC error codes per `error.data.type`.
        mark_replays: add `_meta["io.github.idemtools/replayed"] = true` to replayed results.
        max_retry_after: upper bound (seconds) of `retryAfterMs` on in-progress refusals.
        authorize: the check run before every keyed call of a tool whose policy has none.
        on_outcome: `hook(tool, kind, context)`, sync or async, told what every keyed call came
            to (`idemtools.telemetry.OutcomeContext`); what it raises is logged, never answered.
        tracer_provider: the OpenTelemetry tracer provider to use instead of the global one
            (see `idemtools.telemetry`).
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
            on_outcome=on_outcome,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            store_name=getattr(store, "kind", type(store).__name__),
            digest=_digest,
        )
        self.keeper = LeaseKeeper(
            store,
            on_lost=self._lease_lost,
            on_error=self._renewal_failed,
            on_lapse=self._lease_lapsed,
            timed=self.telemetry.timed,
            on_overrun=self._max_runtime_exceeded,
        )
        self._background: set[asyncio.Task[Any]] = set()
        self._executing: set[_Execution] = set()
        self._idle: anyio.Event | None = None
        self._closing = False
        self._close_when_idle = False  # aclose() returned with calls running: the last closes
        self._closed = False

    # -- decisions ---------------------------------------------------------------------------

    def policy_for(self, name: str, own: Policy | None = None) -> Policy:
        """The policy for a tool: its own, else the registry's, else the server default."""
        return own or self.registry.get(name) or self.default_policy

    def refusal(self, error: RefusedError) -> Outcome:
        """The JSON-RPC error outcome for a refusal; `data.type` tells clients which one."""
        return Outcome.of_error(self.codes.code_for(error.type), error.message, error.data)

    def check_key(self, key: object) -> str:
        if not isinstance(key, str) or not 1 <= len(key) <= self.max_key_length:
            raise KeyInvalidError(
                f"idempotencyKey must be a string of 1 to {self.max_key_length} characters",
                key=key,
            )
        return key

    def handle(self, call: ToolCall, run: Callable[[], Awaitable[Outcome]]) -> Awaitable[Outcome]:
        """Run `run()` at most once per (scope, key); otherwise replay or refuse."""
        # Not a coroutine itself: when nothing observes calls, no extra frame per call.
        if self.telemetry.listening():
            return self._observed(call, run)
        return self._handle(call, run, None)

    async def _observed(self, call: ToolCall, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        obs = self.telemetry.begin(call.name, call.key, self.policy_for(call.name, call.policy))
        try:
            outcome = await self._handle(call, run, obs)
        except BaseException as exc:
            if not obs.executing:  # else the execution, which goes on, ends the observation
                obs.abandon(exc)
            raise
        finally:
            obs.detach()
        if not obs.executing:
            await obs.end(outcome)
        return outcome

    async def _handle(
        self, call: ToolCall, run: Callable[[], Awaitable[Outcome]], obs: Observation | None
    ) -> Outcome:
        try:
            if self._closing:
                raise StoreUnavailableError(_SHUTTING_DOWN, key=call.key)
            key = self.check_key(call.key)
            policy = self.policy_for(call.name, call.policy)
            check = policy.authorize or self.authorize
            if check is not None:  # before any record is read: a replay is no bypass
                await authorize_call(check, call.context, key)
            scope = _scope_hash(policy, call.context, key)
            try:
                fp = fingerprint(call.name, call.arguments)
            except CanonicalizationError as exc:
                raise ArgumentsInvalidError(
                    f"arguments cannot be compared as JSON ({exc}); the call was not run",
                    key=key,
                ) from None
            now = time.time()
            execution = _Execution(scope, key, fp, new_owner(now), policy, call.name, now, obs=obs)
            claim = await self._claim(execution)
            if not claim.claimed:
                if claim.existing is None:  # a store bug, not a client error
                    raise RecordCorruptError("store answered neither claimed nor a record", key=key)
                return self._answer_existing(claim.existing, key, fp, policy)
        except RefusedError as exc:
            self.stats.refusals += 1
            log.info("idempotency refusal %s key_digest=%s", exc.type, _digest(call.key))
            return self.refusal(exc)
        return await self._execute(execution, run)

    async def _claim(self, execution: _Execution) -> Claim:
        """Claim the key; a caller cancelled while the claim is on its way to the store must not
        leave the key "in progress" for a whole lease while nothing runs.

        No shield on this path (an anyio cancel scope costs ~9 us, on every keyed call):
        whatever cancels the caller — anyio (how the SDKs cancel a request: the client's
        `notifications/cancelled`, a dropped connection) or a native `task.cancel()` — the
        claim may or may not have reached the store, so it is released after the fact, fenced
        by the owner token so that it can never free anyone else's claim: on asyncio from a
        background task (once more a moment later, in case the claim was still in flight), on
        trio inline under a shield.
        """
        ex = execution
        # The keeper holds the lease from before the claim is sent: if this event loop blocks
        # between the claim landing and this coroutine seeing the answer, it is renewed anyway.
        held = ex.held = self.keeper.hold(
            ex.scope,
            ex.key,
            ex.owner,
            ex.policy.lease,
            max_runtime=ex.policy.max_runtime,
            tool=ex.tool,
        )
        # The execution counts from here, so that `drain()` waits for a claim still on its way
        # to the store (and the store is not closed under its answer).
        self._executing.add(ex)
        try:
            op: Awaitable[Claim] = self.store.claim(
                ex.scope, ex.key, ex.fingerprint, ex.owner, ex.policy.lease
            )
            if self.telemetry.durations is not None:  # `timed` inline: no call when unmetered
                op = self.telemetry.timed("claim", op)
            claim: Claim = await self._store(op, ex.key)
        except Exception as exc:
            self.keeper.drop(held)
            try:
                if isinstance(exc, StoreUnavailableError):
                    # The store may have applied the claim and lost only its answer (a
                    # timeout, a connection that broke on the way back): release it, fenced
                    # by owner, so that the key does not read "in progress" for a lease while
                    # nothing runs.
                    await self._release_after_failure(ex)
            finally:
                if self._ended_now(ex):
                    with anyio.CancelScope(shield=True):
                        await self._close_later()
            raise
        except BaseException:  # cancelled (asyncio.CancelledError, trio.Cancelled)
            self.keeper.drop(held)
            if _on_asyncio():
                self._release_later(ex)
            else:
                with anyio.CancelScope(shield=True):
                    await self._release_quietly(ex)
            if self._ended_now(ex):
                with anyio.CancelScope(shield=True):
                    await self._close_later()
            raise
        if not claim.claimed:
            self.keeper.drop(held)
            self._executing.discard(ex)
            if self._closing:
                await self._ended(ex)
            return claim
        held.claimed = True
        if self._closing:
            # Claimed after closing began: not run. Released (fenced by owner) before the
            # store may close, and refused like any call that arrives during shutdown.
            self.keeper.drop(held)
            with anyio.CancelScope(shield=True):
                await self._release_quietly(ex, why="the server is shutting down")
                await self._ended(ex)
            raise StoreUnavailableError(_SHUTTING_DOWN, key=ex.key)
        return claim

    async def _release_after_failure(self, ex: _Execution) -> None:
        """Release a claim the store may have applied although it raised: inline, so that the
        refused caller's retry finds the key free, bounded (a store that is down answers the
        release no better); once more later from the background on asyncio, in case the claim
        was still on its way (a timeout) or the store was away a moment."""
        released = False
        try:
            with anyio.move_on_after(self.release_retry_delay):
                released = await self._release_quietly(ex, why=_CLAIM_FAILED)
        finally:
            if not released and _on_asyncio():
                self._release_later(ex, tried=True, why=_CLAIM_FAILED)

    def _release_later(
        self, ex: _Execution, *, tried: bool = False, why: str = "cancellation"
    ) -> None:
        """From a background task: now and once more a moment later, or (`tried`: a first try
        was made inline) only the later one."""
        release = self._release_quietly(ex, again=True, skip_first=tried, why=why)
        try:
            task = asyncio.get_running_loop().create_task(release)
        except RuntimeError:  # pragma: no cover - trio never cancels natively
            release.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release_quietly(
        self,
        ex: _Execution,
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
                if await self.telemetry.timed(
                    "release", self.store.release(ex.scope, ex.key, ex.owner)
                ):
                    self.stats.released += 1
                    log.info("claim released after %s key_digest=%s", why, _digest(ex.key))
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
                    _digest(ex.key),
                    exc,
                )
                if not again:
                    return False
        return False

    def _answer_existing(self, record: Record, key: str, fp: str, policy: Policy) -> Outcome:
        if record.fingerprint != fp:
            self.stats.conflicts += 1
            raise ConflictError(
                "idempotencyKey was already used with a different tool name or arguments",
                key=key,
            )
        if record.status is Status.IN_PROGRESS:
            self.stats.in_progress += 1
            raise InProgressError(
                "a request with this idempotencyKey is still in progress; retry shortly",
                key=key,
                retry_after_ms=_retry_after_ms(
                    record.remaining, policy.lease, self.max_retry_after
                ),
            )
        try:
            if record.outcome is None:
                raise ValueError("completed record without an outcome")
            outcome = Outcome.from_bytes(record.outcome, key=key)
        except ValueError as exc:
            log.error("corrupt idempotency record key_digest=%s: %s", key_digest(key), exc)
            raise RecordCorruptError(
                "the stored outcome for this idempotencyKey cannot be read; the call was "
                "not run again",
                key=key,
            ) from None
        self.stats.replays += 1
        return self._mark(outcome)

    def _mark(self, outcome: Outcome) -> Outcome:
        if not self.mark_replays or outcome.result is None:
            return outcome
        meta = dict(outcome.result.get("_meta") or {})
        meta[REPLAY_META_KEY] = True
        return Outcome(result={**outcome.result, "_meta": meta}, replayed=True)

    async def _store(self, op: Awaitable[Any], key: object) -> Any:
        """Await a store operation; a failure becomes `idempotency_store_unavailable`.

        Every store failure (a store's own `StoreUnavailableError` or anything else it raised)
        is the operator's business: counted in `stats.store_errors` and logged at WARNING with
        its cause. The client gets a message without the store's details (hosts, file paths,
        SQL, driver text), or the `client_message` the store marked as safe to show.
        """
        try:
            return await op
        except StoreUnavailableError as exc:
            raise self._store_failure(exc, key) from exc
        except RefusedError as exc:
            if exc.key is None:  # stores do not know the raw key; the client's error data does
                exc.key = key
            if isinstance(exc, StoreFullError):
                log.warning(
                    "idempotency store %s is full key_digest=%s: %s",
                    _store_name(self.store),
                    _digest(key),
                    exc,
                )
            raise
        except Exception as exc:
            raise self._store_failure(exc, key) from exc

    def _store_failure(self, exc: Exception, key: object) -> StoreUnavailableError:
        self.stats.store_errors += 1
        if isinstance(exc, StoreUnavailableError):
            cause = exc.__cause__
            detail = f"{exc}" + (f" (cause: {cause!r})" if cause is not None else "")
            shown = exc.client_message
        else:
            detail, shown = repr(exc), None
        log.warning(
            "idempotency store %s failed key_digest=%s: %s",
            _store_name(self.store),
            _digest(key),
            detail,
        )
        return StoreUnavailableError(
            shown or "the idempotency store is unavailable; the call was not run", key=key
        )

    # -- the one execution ----------------------------------------------------------------------

    async def _execute(self, ex: _Execution, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        self.stats.executions += 1
        if ex.obs is not None:
            ex.obs.executing = True  # from here the execution, not its caller, ends it
        # A client that cancels or disconnects must not stop the call between its side effect
        # and its record, or the retry would run it again: on asyncio the call runs in its own
        # task behind asyncio.shield, on trio under an anyio shield.
        body = self._execute_body(ex, run)
        if _on_asyncio():
            # asyncio.shield alone holds off every cancellation of the caller, anyio's (a
            # `task.cancel()` underneath) and native ones alike; an anyio shield scope on top
            # would cost ~9 us per call and add nothing. A cancelled caller stops waiting; the
            # call goes on to its record. The task's first step runs at once (`_start_eagerly`):
            # a call that finishes without suspending (a fast tool, MemoryStore) is answered
            # without waiting for the event loop to run its task and then wake this one.
            started = _start_eagerly(asyncio.get_running_loop(), body)
            if not isinstance(started, asyncio.Task):
                return started
            task = started
            self._background.add(task)  # strong reference: it may outlive its caller
            task.add_done_callback(self._background.discard)
            return await asyncio.shield(task)
        with anyio.CancelScope(shield=True):
            outcome = await body
        return outcome

    async def _execute_body(self, ex: _Execution, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        # The lease keeper renews the claim, off this event loop, from the claim (see `_claim`)
        # until the outcome is recorded (a record written after a store outage included).
        held = ex.held
        try:
            if ex.policy.transactional and isinstance(self.store, TransactionalStore):
                outcome = await self._execute_in_transaction(ex, run)
            else:
                outcome = await self._run(ex, run)
                await self._finish(ex, outcome)
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

    @staticmethod
    async def _run(ex: _Execution, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        try:
            return await run()
        except Exception as exc:  # the adapter's run() should not raise; be safe
            log.exception("tools/call raised inside idemtools key_digest=%s", key_digest(ex.key))
            return Outcome.of_error(-32603, f"internal error: {exc}")
        except BaseException as exc:
            if _cancels_the_execution(exc):
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

    async def _execute_in_transaction(
        self, ex: _Execution, run: Callable[[], Awaitable[Outcome]]
    ) -> Outcome:
        assert isinstance(self.store, TransactionalStore)
        try:
            async with self.store.execution(ex.scope, ex.key, ex.owner) as writes:
                outcome = await self._run(ex, run)
                if writes is not None and _failed(outcome):
                    # A failed call keeps none of its writes; its error record still commits.
                    await writes.rollback()
                await self._finish(ex, outcome, strict=True)
        except Exception as exc:
            # Nothing the tool wrote was committed: say so, and free the key for a retry.
            self.stats.record_failures += 1
            log.error("transaction for key_digest=%s did not commit: %r", key_digest(ex.key), exc)
            try:
                await self.store.release(ex.scope, ex.key, ex.owner)
            except Exception as release_exc:
                log.error("could not release key_digest=%s: %r", key_digest(ex.key), release_exc)
            return self.refusal(
                StoreUnavailableError(
                    "the call's transaction could not be committed; nothing it wrote was kept",
                    key=ex.key,
                )
            )
        return outcome

    def _lease_lost(self, held: Lease) -> None:
        # On the keeper thread: another owner holds the key now (a second execution began).
        self.stats.lost_claims += 1
        log.warning("lease lost while running key_digest=%s", key_digest(held.key))

    def _lease_lapsed(self, held: Lease, late: float) -> None:
        # On either thread: the process could not renew in time (see idemtools.lease_keeper).
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

    def _max_runtime_exceeded(self, held: Lease) -> None:
        # On the keeper thread: the tool runs past its policy's max_runtime (hung?).
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

    def _renewal_failed(self, held: Lease, exc: BaseException) -> None:
        self.stats.store_errors += 1
        log.warning("lease renewal failed key_digest=%s: %r", key_digest(held.key), exc)

    async def _finish(self, ex: _Execution, outcome: Outcome, *, strict: bool = False) -> None:
        """Record (or release) the outcome. Failures are logged, unless `strict` re-raises."""
        key = ex.key
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
        try:
            if not outcome.final:
                await self.telemetry.timed("release", self.store.release(ex.scope, key, ex.owner))
                self.stats.released += 1
                return
            data = outcome.to_bytes()
            if len(data) > self.max_outcome_bytes:
                log.error(
                    "outcome of %d bytes exceeds max_outcome_bytes=%d key_digest=%s; recording "
                    "an error in its place",
                    len(data),
                    self.max_outcome_bytes,
                    key_digest(key),
                )
                data = self.refusal(
                    OutcomeTooLargeError(
                        f"the original call completed, but its outcome ({len(data)} bytes) "
                        f"exceeded the {self.max_outcome_bytes}-byte limit and was not kept; "
                        "it will not run again under this key",
                        key=key,
                    )
                ).to_bytes()
            recorded = await self._complete(ex, data, retry=not strict)
            if not recorded:
                # Late completion succeeds whenever nobody else claimed the key, so this
                # means a second execution began while this one ran.
                self.stats.lost_claims += 1
                log.warning(
                    "outcome not recorded: another execution claimed the key meanwhile "
                    "key_digest=%s",
                    key_digest(key),
                )
                if strict:
                    raise RuntimeError("claim lost before the transaction committed")
        except Exception as exc:
            if strict:
                raise
            # The caller still gets its answer; the claim ends by lease.
            self.stats.record_failures += 1
            log.error("could not record outcome key_digest=%s: %r", key_digest(key), exc)

    async def _complete(self, ex: _Execution, data: bytes, *, retry: bool) -> bool:
        """`store.complete`, tried again for up to `record_retry_for` seconds while the store
        is unreachable: the claim stays renewed meanwhile, so a store that comes back (a Redis
        restart, a database failover) gets the record and no retry runs the tool again. The
        window counts from the first failure: reading the clock before every first attempt
        would cost each call that records at once (~1 us: the async backend is looked up)."""
        deadline: float | None = None
        pause = 0.05
        attempts = 0
        while True:
            attempts += 1
            try:
                op: Awaitable[bool] = self.store.complete(
                    ex.scope,
                    ex.key,
                    ex.owner,
                    data,
                    ex.policy.retention,
                    fingerprint=ex.fingerprint,
                )
                if self.telemetry.durations is not None:  # `timed` inline (see `_claim`)
                    op = self.telemetry.timed("complete", op)
                done = await op
                if done or attempts == 1:
                    return done
                # An earlier attempt failed after it had landed (the answer was lost): the
                # record is then ours, completed, and a store answers a second `complete` no.
                return await self._recorded_by(ex)
            except Exception as exc:
                refused = isinstance(exc, RefusedError)
                if refused and not isinstance(exc, StoreUnavailableError):
                    raise  # a decision (store full, corrupt record), not an outage
                # A failed attempt may itself have taken the whole window (a timeout): with
                # retries on, two more follow in any case.
                now = anyio.current_time()
                if deadline is None:
                    deadline = now + (self.record_retry_for if retry else 0.0)
                if now + pause > deadline and (not retry or attempts >= 3):
                    raise
                self.stats.store_errors += 1
                log.warning(
                    "recording the outcome failed, trying again key_digest=%s: %r",
                    key_digest(ex.key),
                    exc.__cause__ if refused and exc.__cause__ else exc,
                )
            await anyio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _recorded_by(self, ex: _Execution) -> bool:
        """Whether the key's record is completed by this very execution (its owner token)."""
        try:
            record = await self.store.get(ex.scope, ex.key)
        except Exception:
            return False
        return record is not None and record.status is Status.COMPLETED and record.owner == ex.owner

    # -- shutdown -------------------------------------------------------------------------------

    @property
    def executing(self) -> int:
        """Keyed calls in flight now: from the moment their claim is sent until their outcome
        is recorded (or the claim released)."""
        return len(self._executing)

    def _ended_now(self, ex: _Execution) -> bool:
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

    async def _ended(self, ex: _Execution) -> None:
        if self._ended_now(ex):
            await self._close_later()

    async def _close_later(self) -> None:
        """Close the lease keeper and the store that `aclose()` left open for calls still
        running: from a task of its own on asyncio (not in the last call's answer path),
        inline under a shield on trio."""
        log.info("shutdown: the last keyed call still running has ended; closing the store")
        if _on_asyncio():
            task = asyncio.get_running_loop().create_task(self._close_now())
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        else:
            with anyio.CancelScope(shield=True):
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
                "first, its claim lapses by lease and a retry may run it again",
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
        await self.store.aclose()


@dataclass(eq=False, slots=True)
class _Execution:
    """One claimed (or about to be claimed) keyed call: what every later step needs."""

    scope: str
    key: str
    fingerprint: str
    owner: str  # unique per execution: fences a stale owner
    policy: Policy
    tool: str
    started: float  # time.time() when the call was decided: how long it has run
    held: Lease | None = None  # the lease keeper's hold on the claim
    obs: Observation | None = None  # telemetry and on_outcome, when anything listens
    reraise: BaseException | None = None  # an interrupt the tool raised, raised once recorded


def _on_asyncio() -> bool:
    return _current_async_library() == "asyncio"


def _cancels_the_execution(exc: BaseException) -> bool:
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
    if not _on_asyncio():
        return True
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0


# -- eager start of an execution's task ----------------------------------------------------------
#
# An execution runs in a task of its own (see `Engine._execute`). Started the ordinary way, the
# task's first step waits for the next event loop iteration, and its caller, waiting on it
# through `asyncio.shield`, is woken two iterations after it ends: three loop iterations and a
# shield per call, ~7 % of a bare in-memory round trip (docs/benchmarks.md). Started eagerly, a
# call that never suspends (a fast tool and MemoryStore) is over before `_start_eagerly`
# returns; one that suspends goes on in its task exactly as before. Python 3.12 does this
# natively (`eager_start`); on 3.11, `_start_eagerly_311` does the same by hand; 3.10 starts it
# lazily.


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
def _resume(coro: Coroutine[Any, Any, Outcome], waiting_on: Any) -> Generator[Any, None, Outcome]:
    """Go on driving a coroutine that already yielded `waiting_on`, exactly as `await` would:
    the task waits on that first (a future or a bare checkpoint), then on whatever follows."""
    while True:
        try:
            yield waiting_on
        except GeneratorExit:  # the task is destroyed unfinished (its loop closed)
            coro.close()
            raise
        except BaseException as exc:  # thrown into the task (a cancellation): pass it on
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
        else:
            outcome: Outcome = yield from coro
            return outcome


def _start_eagerly_311(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Outcome]
) -> Outcome | asyncio.Task[Any]:
    """The outcome when `coro` finished in its first step, else the task it goes on in.

    3.12's eager start, by hand: the task is created first, and made the current task (in its
    own context) while the coroutine's first step runs here, so whatever binds to the current
    task during that step (an anyio cancel scope, `asyncio.timeout`) binds to the task that
    carries on, never to the caller.
    """
    step = _FirstStep(coro)
    context = contextvars.copy_context()
    task = loop.create_task(_carry_on(step), context=context)  # type: ignore[call-arg,unused-ignore]
    caller = asyncio.current_task(loop)
    if caller is not None:
        asyncio.tasks._leave_task(loop, caller)
    asyncio.tasks._enter_task(loop, task)
    try:
        step.waiting_on = context.run(coro.send, None)
    except StopIteration as stop:
        step.finished, step.outcome = True, stop.value
    except BaseException:
        step.finished = True  # the task then ends at once; the exception is the caller's
        raise
    finally:
        asyncio.tasks._leave_task(loop, task)
        if caller is not None:
            asyncio.tasks._enter_task(loop, caller)
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


if sys.version_info >= (3, 12):
    _start_eagerly = _start_eagerly_312
elif sys.version_info >= (3, 11):
    _start_eagerly = _start_eagerly_311
else:  # pragma: no cover
    _start_eagerly = _start_lazily


def _scope_hash(policy: Policy, context: CallContext, key: str) -> str:
    try:
        value = policy.scope(context)
    except RefusedError as exc:
        if exc.key is None:
            exc.key = key
        raise
    except Exception as exc:  # a user-written strategy failed: refuse, never guess
        log.warning("scope strategy %r failed: %r", policy.scope, exc)
        raise ScopeUnavailableError(f"the tool's scope strategy failed: {exc}", key=key) from exc
    if not isinstance(value, str) or not value:
        raise ScopeUnavailableError("the tool's scope strategy returned no scope", key=key)
    return _scope_digest(value)


@functools.lru_cache(maxsize=1024)
def _scope_digest(value: str) -> str:
    # A server sees few distinct scopes (one local user, its callers): remember their hashes
    # rather than run SHA-256 on every keyed call. Bounded; the values are already in memory.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _retry_after_ms(remaining: float, lease: float, cap: float) -> int:
    """A quarter of the lease, at most `cap`, and never later than the lease's end.

    The original call usually finishes long before its lease would run out; a short wait
    keeps a retrying client responsive, while the lease bounds it when the owner died.
    """
    wait = min(max(remaining, 0.0), lease / 4, cap)
    return max(1, math.ceil(wait * 1000))


def _failed(outcome: Outcome) -> bool:
    """An error (JSON-RPC or `isError`) or an answer that does not end the operation."""
    if outcome.is_error or not outcome.final:
        return True
    return outcome.result is not None and outcome.result.get("isError") is True


def _store_name(store: Store) -> str:
    """The store's kind, and its safe description when it has one (never a password)."""
    kind = getattr(store, "kind", type(store).__name__)
    description = getattr(store, "description", None)
    if not isinstance(description, str) or not description:
        return kind
    return f"{kind} ({redact_url(description)})"  # a custom store may describe itself by URL


def _digest(key: object) -> str:
    return key_digest(key) if isinstance(key, str) else f"<{type(key).__name__}>"
