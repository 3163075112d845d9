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
import functools
import hashlib
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

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
    StoreUnavailableError,
)
from .outcome import Outcome
from .policy import DEFAULT_POLICY, Policy, Registry, authorize_call, default_registry
from .scopes import AuthorizeFn, CallContext
from .stores.base import Record, Status, Store, TransactionalStore

try:  # trio depends on sniffio; without it, anyio's only other backend (asyncio) is running
    from sniffio import current_async_library as _current_async_library
except ImportError:  # pragma: no cover

    def _current_async_library() -> str:
        return "asyncio"


__all__ = ["REPLAY_META_KEY", "Engine", "EngineStats", "ToolCall", "key_digest"]

log = logging.getLogger("idemtools")

REPLAY_META_KEY = "io.github.idemtools/replayed"
"""The `_meta` key of the opt-in replay marker on replayed results."""


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
        self._inflight: set[asyncio.Task[Outcome]] = set()

    # -- decisions ---------------------------------------------------------------------------

    def policy_for(self, name: str, own: Policy | None = None) -> Policy:
        """The policy for a tool: its own, else the registry's, else the server default."""
        return own or self.registry.get(name) or self.default_policy

    def refusal(self, error: RefusedError) -> Outcome:
        """The JSON-RPC error outcome for a refusal; `data.type` tells clients which one."""
        return Outcome.of_error(self.codes.code_for(error.type), error.message, error.data())

    def check_key(self, key: object) -> str:
        if not isinstance(key, str) or not 1 <= len(key) <= self.max_key_length:
            raise KeyInvalidError(
                f"idempotencyKey must be a string of 1 to {self.max_key_length} characters",
                key=key,
            )
        return key

    async def handle(self, call: ToolCall, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        """Run `run()` at most once per (scope, key); otherwise replay or refuse."""
        try:
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
            owner = os.urandom(16).hex()  # unique per execution: fences a stale owner
            claim = await self._store(self.store.claim(scope, key, fp, owner, policy.lease), key)
            if not claim.claimed:
                if claim.existing is None:  # a store bug, not a client error
                    raise RecordCorruptError("store answered neither claimed nor a record", key=key)
                return self._answer_existing(claim.existing, key, fp, policy)
        except RefusedError as exc:
            self.stats.refusals += 1
            log.info("idempotency refusal %s key=%s", exc.type, _digest(call.key))
            return self.refusal(exc)
        return await self._execute(scope, key, owner, policy, run)

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
            outcome = Outcome.from_bytes(record.outcome)
        except ValueError as exc:
            log.error("corrupt idempotency record key=%s: %s", key_digest(key), exc)
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
        """Await a store operation; anything but a refusal means the store is unavailable."""
        try:
            return await op
        except RefusedError as exc:
            if exc.key is None:  # stores do not know the raw key; the client's error data does
                exc.key = key
            raise
        except Exception as exc:
            self.stats.store_errors += 1
            log.warning("idempotency store failed key=%s: %r", _digest(key), exc)
            raise StoreUnavailableError(
                "the idempotency store is unavailable; the call was not run", key=key
            ) from exc

    # -- the one execution ----------------------------------------------------------------------

    async def _execute(
        self,
        scope: str,
        key: str,
        owner: str,
        policy: Policy,
        run: Callable[[], Awaitable[Outcome]],
    ) -> Outcome:
        self.stats.executions += 1
        # A client that cancels or disconnects must not stop the call between its side effect
        # and its record, or the retry would run it again. anyio cancellation is held off by a
        # shield; on asyncio the call also runs in its own task, because a native
        # `task.cancel()` (asyncio.wait_for, a TaskGroup) goes through any anyio shield.
        # The backend is looked up once per call (sniffio, ~1 us) and handed down.
        on_asyncio = _on_asyncio()
        with anyio.CancelScope(shield=True):
            body = self._execute_body(scope, key, owner, policy, run, on_asyncio)
            if on_asyncio:
                task = asyncio.get_running_loop().create_task(body)
                self._inflight.add(task)  # strong reference: the task may outlive its caller
                task.add_done_callback(self._inflight.discard)
                outcome = await asyncio.shield(task)
            else:
                outcome = await body
        return outcome

    async def _execute_body(
        self,
        scope: str,
        key: str,
        owner: str,
        policy: Policy,
        run: Callable[[], Awaitable[Outcome]],
        on_asyncio: bool,
    ) -> Outcome:
        if policy.transactional and isinstance(self.store, TransactionalStore):
            return await self._execute_in_transaction(scope, key, owner, policy, run, on_asyncio)
        outcome = await self._run_renewed(scope, key, owner, policy, run, on_asyncio)
        await self._finish(scope, key, owner, policy, outcome)
        return outcome

    async def _run_renewed(
        self,
        scope: str,
        key: str,
        owner: str,
        policy: Policy,
        run: Callable[[], Awaitable[Outcome]],
        on_asyncio: bool,
    ) -> Outcome:
        """Run the tool while its lease is renewed every lease/3, and never after it ends.

        On asyncio the first renewal is a timer (`loop.call_later`): a call shorter than
        lease/3 costs one timer, no task. When the timer fires, a task runs `_renew` from
        there on. On trio, a task group runs `_renew` beside the tool.
        """
        if on_asyncio:
            renewal = _AsyncioRenewal(self, scope, key, owner, policy.lease)
            try:
                return await self._run(key, run)
            finally:
                if renewal.task is None:
                    renewal.cancel_timer()  # the usual case: no renewal was due, nothing to await
                else:
                    await renewal.stop()
        outcome: Outcome | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew, scope, key, owner, policy.lease)
            try:
                outcome = await self._run(key, run)
            finally:
                tg.cancel_scope.cancel()
        assert outcome is not None
        return outcome

    @staticmethod
    async def _run(key: str, run: Callable[[], Awaitable[Outcome]]) -> Outcome:
        try:
            return await run()
        except Exception as exc:  # the adapter's run() should not raise; be safe
            log.exception("tools/call raised inside idemtools key=%s", key_digest(key))
            return Outcome.of_error(-32603, f"internal error: {exc}")

    async def _execute_in_transaction(
        self,
        scope: str,
        key: str,
        owner: str,
        policy: Policy,
        run: Callable[[], Awaitable[Outcome]],
        on_asyncio: bool,
    ) -> Outcome:
        assert isinstance(self.store, TransactionalStore)
        try:
            async with self.store.execution(scope, key, owner):
                outcome = await self._run_renewed(scope, key, owner, policy, run, on_asyncio)
                await self._finish(scope, key, owner, policy, outcome, strict=True)
        except Exception as exc:
            # Nothing the tool wrote was committed: say so, and free the key for a retry.
            self.stats.record_failures += 1
            log.error("transaction for key=%s did not commit: %r", key_digest(key), exc)
            try:
                await self.store.release(scope, key, owner)
            except Exception as release_exc:
                log.error("could not release key=%s: %r", key_digest(key), release_exc)
            return self.refusal(
                StoreUnavailableError(
                    "the call's transaction could not be committed; nothing it wrote was kept",
                    key=key,
                )
            )
        return outcome

    async def _renew(
        self, scope: str, key: str, owner: str, lease: float, *, wait_first: bool = True
    ) -> None:
        interval = lease / 3
        if wait_first:
            await anyio.sleep(interval)
        while True:
            try:
                held = await self.store.renew(scope, key, owner, lease)
            except Exception as exc:
                self.stats.store_errors += 1
                log.warning("lease renewal failed key=%s: %r", key_digest(key), exc)
            else:
                if not held:
                    self.stats.lost_claims += 1
                    log.warning("lease lost while running key=%s", key_digest(key))
                    return
            await anyio.sleep(interval)

    async def _finish(
        self,
        scope: str,
        key: str,
        owner: str,
        policy: Policy,
        outcome: Outcome,
        *,
        strict: bool = False,
    ) -> None:
        """Record (or release) the outcome. Failures are logged, unless `strict` re-raises."""
        try:
            if not outcome.final:
                await self.store.release(scope, key, owner)
                self.stats.released += 1
                return
            data = outcome.to_bytes()
            if len(data) > self.max_outcome_bytes:
                log.error(
                    "outcome of %d bytes exceeds max_outcome_bytes=%d key=%s; recording an "
                    "error in its place",
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
            if not await self.store.complete(scope, key, owner, data, policy.retention):
                self.stats.lost_claims += 1
                log.warning("claim lost before completion key=%s", key_digest(key))
                if strict:
                    raise RuntimeError("claim lost before the transaction committed")
        except Exception as exc:
            if strict:
                raise
            # The caller still gets its answer; the claim ends by lease.
            self.stats.record_failures += 1
            log.error("could not record outcome key=%s: %r", key_digest(key), exc)


class _AsyncioRenewal:
    """Lease renewal on asyncio: a timer until the first renewal is due, then a task.

    `stop()` cancels the timer, or cancels the task and waits for it to end, so no renewal
    starts (or is still on its way) once the call has ended, as with a task group.
    """

    __slots__ = ("engine", "handle", "key", "lease", "loop", "owner", "scope", "task")

    def __init__(self, engine: Engine, scope: str, key: str, owner: str, lease: float) -> None:
        self.engine = engine
        self.scope = scope
        self.key = key
        self.owner = owner
        self.lease = lease
        self.loop = asyncio.get_running_loop()
        self.task: asyncio.Task[None] | None = None
        # The timer (and so the task) runs in a copy of this context, as a task group would.
        self.handle: asyncio.TimerHandle | None = self.loop.call_later(lease / 3, self._fire)

    def _fire(self) -> None:
        self.handle = None
        coro = self.engine._renew(self.scope, self.key, self.owner, self.lease, wait_first=False)
        self.task = self.loop.create_task(coro)

    def cancel_timer(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    async def stop(self) -> None:
        self.cancel_timer()
        task = self.task
        if task is None:
            return
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
        if not task.cancelled():
            error = task.exception()  # never an Exception: _renew logs and counts those
            if error is not None:
                raise error


def _on_asyncio() -> bool:
    return _current_async_library() == "asyncio"


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


def _digest(key: object) -> str:
    return key_digest(key) if isinstance(key, str) else f"<{type(key).__name__}>"
