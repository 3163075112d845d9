"""The engine's state machine (docs/contract.md), driven through `Engine.handle` with a MemoryStore.

Time is a fake clock given to the store; nothing here sleeps to make a record expire. The only
real-time waits are the lease-renewal test (renewal runs on real time by design) and short
`fail_after` guards that turn an accidental block into a failure instead of a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from idemtools import (
    AuthInfo,
    CallContext,
    Engine,
    ErrorCodes,
    Outcome,
    Policy,
    Registry,
    ScopeUnavailableError,
    StoreUnavailableError,
    by_auth_subject,
    fingerprint,
    per_session,
    scope,
    shared,
)
from idemtools.engine import REPLAY_META_KEY, ToolCall
from idemtools.stores import MemoryStore
from idemtools.stores.base import Claim, Record, Status, Store, TransactionalStore

from ..stores.fixtures import STORE_KINDS, new_store

STDIO = CallContext(transport="stdio")
LEASE = 30.0
RETENTION = 600.0
POLICY = Policy.of(retention=RETENTION, lease=LEASE)


class Clock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 10_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Tool:
    """A run() callable that counts its executions and answers a fixed (or numbered) outcome."""

    def __init__(self, outcome: Outcome | None = None) -> None:
        self.calls = 0
        self.outcome = outcome

    async def __call__(self) -> Outcome:
        self.calls += 1
        if self.outcome is not None:
            return self.outcome
        return ok(f"run {self.calls}")


def ok(text: str, **extra: Any) -> Outcome:
    return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False, **extra})


def data(outcome: Outcome) -> dict[str, Any]:
    assert outcome.error is not None, f"expected an error outcome, got {outcome}"
    result: dict[str, Any] = outcome.error["data"]
    return result


def dtype(outcome: Outcome) -> str | None:
    if outcome.error is None:
        return None
    return data(outcome).get("type")


def call(
    key: object = "k1",
    arguments: dict[str, Any] | None = None,
    *,
    name: str = "charge",
    context: CallContext = STDIO,
    policy: Policy | None = POLICY,
) -> ToolCall:
    args = {"amount": 10} if arguments is None else arguments
    return ToolCall(name=name, arguments=args, key=key, context=context, policy=policy)


def http(
    subject: str | None = None, *, issuer: str = "https://as.example", **kw: Any
) -> CallContext:
    auth = AuthInfo(issuer=issuer, subject=subject) if subject is not None else None
    return CallContext(transport="http", auth=auth, **kw)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, clock: Clock) -> Store:
    """Each engine test runs on the reference store (the executable spec of the five
    operations) and on MemoryStore (the optimisation that must answer the same)."""
    return new_store(request.param, clock=clock)


@pytest.fixture
def engine(store: MemoryStore) -> Engine:
    return Engine(store, registry=Registry())


class Wrap:
    """Delegates to a MemoryStore; subclasses break one operation. Records what it was asked."""

    kind = "wrap"

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.claims: list[tuple[str, str]] = []
        self.events: list[str] = []

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        self.claims.append((scope, key))
        return await self.inner.claim(scope, key, fingerprint, owner, lease)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        return await self.inner.renew(scope, key, owner, lease)

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        self.events.append("complete")
        return await self.inner.complete(
            scope, key, owner, outcome, retention, fingerprint=fingerprint
        )

    async def release(self, scope: str, key: str, owner: str) -> bool:
        self.events.append("release")
        return await self.inner.release(scope, key, owner)

    async def get(self, scope: str, key: str) -> Record | None:
        return await self.inner.get(scope, key)

    async def aclose(self) -> None:
        return None


async def scope_of(store: MemoryStore, context: CallContext, key: str = "probe") -> str:
    """The hashed scope the engine uses for a context, learned through a recording store."""
    wrap = Wrap(store)
    await Engine(wrap, registry=Registry()).handle(call(key, context=context), Tool())
    return wrap.claims[-1][0]


# --------------------------------------------------------------------------------------------
# the four outcomes
# --------------------------------------------------------------------------------------------


async def test_first_run_records_and_answers(engine: Engine, store: MemoryStore) -> None:
    tool = Tool()
    answer = await engine.handle(call(), tool)
    assert answer == ok("run 1")
    assert not answer.replayed
    assert tool.calls == 1
    assert engine.stats.executions == 1
    scope = await scope_of(store, STDIO)
    record = await store.get(scope, "k1")
    assert record is not None
    assert record.status is Status.COMPLETED
    assert record.fingerprint == fingerprint("charge", {"amount": 10})
    assert record.outcome is not None and Outcome.from_bytes(record.outcome) == answer


async def test_completed_is_replayed_identically(engine: Engine) -> None:
    tool = Tool()
    first = await engine.handle(call(), tool)
    for _ in range(3):
        again = await engine.handle(call(), tool)
        assert again == first
        assert again.to_bytes() == first.to_bytes()
        assert again.replayed
    assert tool.calls == 1
    assert engine.stats.replays == 3


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(result={"content": [{"type": "text", "text": "card declined"}], "isError": True}),
        Outcome.of_error(-32602, "Unknown tool: charge"),
        Outcome.of_error(-32000, "boom", {"detail": ["x", 1.5, None]}),
        Outcome(result={"task": {"taskId": "t-1", "status": "working"}}),
        ok("ünïcödé 🔑 \u0000", structuredContent={"n": 2**53 + 1, "f": 0.1}),
    ],
    ids=["isError", "jsonrpc-error", "error-with-data", "task-created", "unicode"],
)
async def test_error_and_other_outcomes_are_replayed(engine: Engine, outcome: Outcome) -> None:
    tool = Tool(outcome)
    first = await engine.handle(call(), tool)
    assert first == outcome
    again = await engine.handle(call(), tool)
    assert again == outcome
    assert again.to_bytes() == outcome.to_bytes()
    assert tool.calls == 1


async def test_in_progress_refused_at_once(engine: Engine) -> None:
    started, release = anyio.Event(), anyio.Event()
    runs = 0

    async def slow() -> Outcome:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()
        return ok("slow")

    results: list[Outcome] = []
    async with anyio.create_task_group() as tg:

        async def first() -> None:
            results.append(await engine.handle(call("k"), slow))

        tg.start_soon(first)
        await started.wait()
        try:
            with anyio.fail_after(2):  # never blocks on the running call
                refused = await engine.handle(call("k"), slow)
        finally:
            release.set()

    assert runs == 1
    assert results == [ok("slow")]
    assert data(refused) == {
        "type": "idempotency_key_in_progress",
        "idempotencyKey": "k",
        "retryAfterMs": data(refused)["retryAfterMs"],
        "notProcessed": True,
    }
    retry_after = data(refused)["retryAfterMs"]
    assert isinstance(retry_after, int) and 0 < retry_after <= LEASE * 1000
    assert refused.error is not None
    assert refused.error["code"] == ErrorCodes().idempotency_key_in_progress
    assert engine.stats.in_progress == 1
    assert await engine.handle(call("k"), slow) == ok("slow")  # then the replay


@pytest.mark.parametrize(
    "other",
    [
        call("k1", {"amount": 11}),
        call("k1", {"amount": 10, "currency": "EUR"}),
        call("k1", {}),
        call("k1", {"amount": 10}, name="refund"),
        call("k1", {"amount": "10"}),
    ],
)
async def test_same_key_other_request_is_a_conflict(engine: Engine, other: ToolCall) -> None:
    tool = Tool()
    await engine.handle(call("k1", {"amount": 10}), tool)
    answer = await engine.handle(other, tool)
    assert data(answer) == {
        "type": "idempotency_key_conflict",
        "idempotencyKey": "k1",
        "notProcessed": True,
    }
    assert answer.error is not None
    assert answer.error["code"] == ErrorCodes().idempotency_key_conflict
    assert tool.calls == 1
    assert engine.stats.conflicts == 1


async def test_conflict_while_in_progress(engine: Engine) -> None:
    started, release = anyio.Event(), anyio.Event()

    async def slow() -> Outcome:
        started.set()
        await release.wait()
        return ok("slow")

    tool = Tool()
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.handle, call("k", {"amount": 1}), slow)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        await started.wait()
        try:
            answer = await engine.handle(call("k", {"amount": 2}), tool)
        finally:
            release.set()
    assert dtype(answer) == "idempotency_key_conflict"
    assert tool.calls == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"amount": 10}, {"amount": 10.0}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"n": 10**20}, {"n": 1e20}),
        (None, {}),
        ({}, None),
    ],
)
async def test_equivalent_arguments_replay(
    engine: Engine, first: dict[str, Any] | None, second: dict[str, Any] | None
) -> None:
    tool = Tool()
    a = ToolCall(name="t", arguments=first, key="k", context=STDIO, policy=POLICY)
    b = ToolCall(name="t", arguments=second, key="k", context=STDIO, policy=POLICY)
    assert await engine.handle(a, tool) == await engine.handle(b, tool)
    assert tool.calls == 1


async def test_different_keys_run_separately(engine: Engine) -> None:
    tool = Tool()
    assert await engine.handle(call("a"), tool) == ok("run 1")
    assert await engine.handle(call("b"), tool) == ok("run 2")
    assert tool.calls == 2


# --------------------------------------------------------------------------------------------
# refused before anything runs: keys and arguments
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "echo"),
    [
        (5, 5),
        (1.5, 1.5),
        (True, True),
        ("", ""),
        ("x" * 256, "x" * 64 + "…"),
        ("y" * 10_000, "y" * 64 + "…"),
        (["a"], '["a"]'),
        ({"k": "v" * 200}, ('{"k": "' + "v" * 200)[:64] + "…"),
    ],
    ids=["int", "float", "bool", "empty", "too-long", "much-too-long", "list", "dict"],
)
async def test_invalid_keys_refused(engine: Engine, key: object, echo: object) -> None:
    tool = Tool()
    answer = await engine.handle(call(key), tool)
    assert data(answer) == {
        "type": "idempotency_key_invalid",
        "idempotencyKey": echo,
        "notProcessed": True,
    }
    assert answer.error is not None
    assert answer.error["code"] == -32602
    assert tool.calls == 0
    assert engine.stats.refusals == 1


async def test_key_length_limits(engine: Engine) -> None:
    tool = Tool()
    assert await engine.handle(call("x" * 255), tool) == ok("run 1")
    assert await engine.handle(call("z"), tool) == ok("run 2")
    assert await engine.handle(call("\U0001f511" * 255), tool) == ok("run 3")  # characters
    assert tool.calls == 3


async def test_max_key_length_is_configurable(store: MemoryStore) -> None:
    engine = Engine(store, registry=Registry(), max_key_length=10)
    tool = Tool()
    assert await engine.handle(call("a" * 10), tool) == ok("run 1")
    answer = await engine.handle(call("a" * 11), tool)
    assert dtype(answer) == "idempotency_key_invalid"
    assert data(answer)["idempotencyKey"] == "a" * 11
    assert tool.calls == 1


@pytest.mark.parametrize(
    "arguments",
    [{"x": float("nan")}, {"x": float("inf")}, {"x": [1, {"y": float("-inf")}]}],
)
async def test_non_json_arguments_refused(engine: Engine, arguments: dict[str, Any]) -> None:
    tool = Tool()
    answer = await engine.handle(call("k", arguments), tool)
    assert data(answer) == {
        "type": "idempotency_arguments_invalid",
        "idempotencyKey": "k",
        "notProcessed": True,
    }
    assert answer.error is not None
    assert answer.error["code"] == ErrorCodes().idempotency_arguments_invalid
    assert tool.calls == 0


async def test_error_codes_are_configurable(store: MemoryStore) -> None:
    codes = ErrorCodes(idempotency_key_conflict=-31000, idempotency_key_invalid=-31001)
    engine = Engine(store, registry=Registry(), codes=codes)
    await engine.handle(call("k", {"a": 1}), Tool())
    conflict = await engine.handle(call("k", {"a": 2}), Tool())
    invalid = await engine.handle(call(""), Tool())
    assert conflict.error is not None and conflict.error["code"] == -31000
    assert invalid.error is not None and invalid.error["code"] == -31001


# --------------------------------------------------------------------------------------------
# time: retention and lease
# --------------------------------------------------------------------------------------------


async def test_replayed_until_retention_then_runs_again(engine: Engine, clock: Clock) -> None:
    tool = Tool()
    assert await engine.handle(call(), tool) == ok("run 1")
    clock.advance(RETENTION - 1)
    assert await engine.handle(call(), tool) == ok("run 1")
    clock.advance(2)
    assert await engine.handle(call(), tool) == ok("run 2")
    assert tool.calls == 2
    # and after expiry the key is new: other arguments are not a conflict any more
    clock.advance(RETENTION + 1)
    assert await engine.handle(call(arguments={"amount": 99}), tool) == ok("run 3")


async def test_retention_is_per_tool(engine: Engine, clock: Clock) -> None:
    short = Policy.of(retention=5, lease=1)
    tool = Tool()
    assert await engine.handle(call("k", policy=short), tool) == ok("run 1")
    assert await engine.handle(call("j", name="other", policy=POLICY), tool) == ok("run 2")
    clock.advance(6)
    assert await engine.handle(call("k", policy=short), tool) == ok("run 3")
    assert await engine.handle(call("j", name="other", policy=POLICY), tool) == ok("run 2")


async def test_abandoned_claim_runs_again_after_its_lease(
    engine: Engine, store: MemoryStore, clock: Clock
) -> None:
    # A process claimed the key and died: its claim is never renewed, completed or released.
    scope = await scope_of(store, STDIO)
    fp = fingerprint("charge", {"amount": 10})
    assert (await store.claim(scope, "k1", fp, "dead-process", LEASE)).claimed

    tool = Tool()
    refused = await engine.handle(call("k1"), tool)
    assert dtype(refused) == "idempotency_key_in_progress"
    assert 0 < data(refused)["retryAfterMs"] <= LEASE * 1000
    clock.advance(LEASE - 1)
    assert dtype(await engine.handle(call("k1"), tool)) == "idempotency_key_in_progress"
    clock.advance(2)
    assert await engine.handle(call("k1"), tool) == ok("run 1")
    assert tool.calls == 1
    assert await engine.handle(call("k1"), tool) == ok("run 1")


async def test_retry_after_never_beyond_the_lease_end(
    engine: Engine, store: MemoryStore, clock: Clock
) -> None:
    scope = await scope_of(store, STDIO)
    fp = fingerprint("charge", {"amount": 10})
    await store.claim(scope, "k1", fp, "dead-process", LEASE)
    clock.advance(LEASE - 0.25)
    refused = await engine.handle(call("k1"), Tool())
    assert 0 < data(refused)["retryAfterMs"] <= 250


async def test_lease_is_renewed_while_the_tool_runs(store: MemoryStore, clock: Clock) -> None:
    # Renewal runs on real time (lease / 3); the fake clock moves by less than a lease between
    # renewals but by several leases in total. Without renewal the inner call would claim anew.
    engine = Engine(store, registry=Registry())
    policy = Policy.of(retention=RETENTION, lease=0.3)
    inner: list[Outcome] = []
    other = Tool()

    async def long_running() -> Outcome:
        for _ in range(10):
            clock.advance(0.1)
            await anyio.sleep(0.12)
        inner.append(await engine.handle(call("k", policy=policy), other))
        return ok("long")

    assert await engine.handle(call("k", policy=policy), long_running) == ok("long")
    assert other.calls == 0
    assert dtype(inner[0]) == "idempotency_key_in_progress"
    assert engine.stats.lost_claims == 0
    assert await engine.handle(call("k", policy=policy), other) == ok("long")


# --------------------------------------------------------------------------------------------
# fencing
# --------------------------------------------------------------------------------------------


async def test_stale_owner_cannot_complete_over_a_newer_claim(
    engine: Engine, store: MemoryStore, clock: Clock
) -> None:
    newer = Tool(ok("newer"))
    inner: list[Outcome] = []

    async def stale() -> Outcome:
        clock.advance(LEASE + 1)  # our lease ran out while we were "paused"
        inner.append(await engine.handle(call("k"), newer))  # a retry claims and completes
        return ok("stale")

    assert await engine.handle(call("k"), stale) == ok("stale")  # the caller still gets it
    assert inner == [ok("newer")]
    assert newer.calls == 1
    assert engine.stats.lost_claims == 1
    replay = await engine.handle(call("k"), Tool())
    assert replay == ok("newer")
    scope = await scope_of(store, STDIO)
    record = await store.get(scope, "k")
    assert record is not None and record.outcome is not None
    assert Outcome.from_bytes(record.outcome) == ok("newer")


async def test_stale_owner_cannot_complete_over_a_running_newer_claim(
    engine: Engine, clock: Clock
) -> None:
    started, release = anyio.Event(), anyio.Event()

    async def newer() -> Outcome:
        started.set()
        await release.wait()
        return ok("newer")

    async def stale() -> Outcome:
        clock.advance(LEASE + 1)
        tg.start_soon(engine.handle, call("k"), newer)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        await started.wait()
        return ok("stale")  # completes while the newer claim is still running

    async with anyio.create_task_group() as tg:
        try:
            assert await engine.handle(call("k"), stale) == ok("stale")
            # the newer claim is untouched: in progress, not completed by the stale owner
            seen = await engine.handle(call("k"), Tool())
        finally:
            release.set()  # the shielded newer call cannot be cancelled: always let it end
    assert dtype(seen) == "idempotency_key_in_progress"
    assert await engine.handle(call("k"), Tool()) == ok("newer")


# --------------------------------------------------------------------------------------------
# scope
# --------------------------------------------------------------------------------------------


async def test_two_subjects_one_key_both_run_neither_sees_the_other(engine: Engine) -> None:
    alice, bob = http("alice"), http("bob")
    tool_a, tool_b = Tool(ok("alice's")), Tool(ok("bob's"))
    assert await engine.handle(call("k", context=alice), tool_a) == ok("alice's")
    assert await engine.handle(call("k", context=bob), tool_b) == ok("bob's")
    assert await engine.handle(call("k", context=alice), tool_b) == ok("alice's")
    assert await engine.handle(call("k", context=bob), tool_a) == ok("bob's")
    assert (tool_a.calls, tool_b.calls) == (1, 1)
    # other arguments under another subject are not a conflict either
    assert await engine.handle(call("k", {"amount": 5}, context=http("carol")), Tool()) == ok(
        "run 1"
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (AuthInfo(issuer="https://a", subject="s"), AuthInfo(issuer="https://b", subject="s")),
        (AuthInfo(issuer="i", subject="s1"), AuthInfo(issuer="i", subject="s2")),
        (AuthInfo(issuer="i", subject="x"), AuthInfo(issuer="i", subject="y", client_id="x")),
    ],
)
async def test_auth_identities_are_isolated(engine: Engine, a: AuthInfo, b: AuthInfo) -> None:
    tool = Tool()
    await engine.handle(call("k", context=CallContext(transport="http", auth=a)), tool)
    await engine.handle(call("k", context=CallContext(transport="http", auth=b)), tool)
    assert tool.calls == 2


async def test_subject_wins_over_client_id(engine: Engine) -> None:
    tool = Tool()
    a = CallContext(transport="http", auth=AuthInfo(issuer="i", subject="s", client_id="app-1"))
    b = CallContext(transport="http", auth=AuthInfo(issuer="i", subject="s", client_id="app-2"))
    await engine.handle(call("k", context=a), tool)
    assert await engine.handle(call("k", context=b), tool) == ok("run 1")
    assert tool.calls == 1


@pytest.mark.parametrize(
    "context",
    [
        CallContext(transport="http"),
        CallContext(transport="http", auth=AuthInfo(issuer="https://as.example")),
        CallContext(transport="http", session_id="s1"),
        CallContext(transport="unknown"),
    ],
)
async def test_http_without_auth_fails_closed(engine: Engine, context: CallContext) -> None:
    tool = Tool()
    answer = await engine.handle(call("k", context=context), tool)
    assert data(answer) == {
        "type": "idempotency_scope_unavailable",
        "idempotencyKey": "k",
        "notProcessed": True,
    }
    assert answer.error is not None
    assert answer.error["code"] == ErrorCodes().idempotency_scope_unavailable
    assert tool.calls == 0


@pytest.mark.parametrize("transport", ["stdio", "memory"])
async def test_local_transports_scope_by_local_user(engine: Engine, transport: Any) -> None:
    tool = Tool()
    context = CallContext(transport=transport)
    assert await engine.handle(call("k", context=context), tool) == ok("run 1")
    assert await engine.handle(call("k", context=context), tool) == ok("run 1")
    assert tool.calls == 1


async def test_shared_scope_is_an_explicit_opt_in(engine: Engine) -> None:
    policy = Policy.of(scope=shared, retention=RETENTION, lease=LEASE)
    tool = Tool()
    first = await engine.handle(call("k", context=http("alice"), policy=policy), tool)
    assert await engine.handle(call("k", context=http("bob"), policy=policy), tool) == first
    assert await engine.handle(call("k", context=http(), policy=policy), tool) == first
    assert tool.calls == 1


async def test_policy_comes_from_the_registry_then_the_default(store: MemoryStore) -> None:
    registry = Registry()
    registry.register("open", Policy.of(scope=shared))
    engine = Engine(store, registry=registry)
    tool = Tool()
    anonymous = http()
    assert await engine.handle(call("k", name="open", context=anonymous, policy=None), tool) == ok(
        "run 1"
    )
    refused = await engine.handle(call("k", name="closed", context=anonymous, policy=None), tool)
    assert dtype(refused) == "idempotency_scope_unavailable"  # default: by_auth_subject
    own = Policy.of(scope=shared)  # the tool's own policy wins over the registry
    assert await engine.handle(call("k2", name="closed", context=anonymous, policy=own), tool) == (
        ok("run 2")
    )
    assert tool.calls == 2


async def test_fallback_composition(engine: Engine) -> None:
    policy = Policy.of(scope=by_auth_subject | per_session)
    tool = Tool()
    s1, s2 = http(session_id="s1"), http(session_id="s2")
    assert await engine.handle(call("k", context=s1, policy=policy), tool) == ok("run 1")
    assert await engine.handle(call("k", context=s2, policy=policy), tool) == ok("run 2")
    assert await engine.handle(call("k", context=s1, policy=policy), tool) == ok("run 1")
    # authenticated: the subject is the scope, whatever the session
    alice1, alice2 = http("alice", session_id="s1"), http("alice", session_id="s9")
    assert await engine.handle(call("j", context=alice1, policy=policy), tool) == ok("run 3")
    assert await engine.handle(call("j", context=alice2, policy=policy), tool) == ok("run 3")
    refused = await engine.handle(call("k", context=http(), policy=policy), tool)
    assert dtype(refused) == "idempotency_scope_unavailable"
    assert tool.calls == 3


@scope("per tenant (test)")
def by_tenant(ctx: CallContext) -> str:
    if not isinstance(ctx.raw, dict) or "tenant" not in ctx.raw:
        raise ScopeUnavailableError("no tenant")
    return str(ctx.raw["tenant"])


async def test_both_composition(engine: Engine) -> None:
    policy = Policy.of(scope=by_auth_subject & by_tenant)
    tool = Tool()

    def ctx(subject: str | None, tenant: str | None) -> CallContext:
        raw = {"tenant": tenant} if tenant is not None else None
        return http(subject, raw=raw) if subject else CallContext(transport="http", raw=raw)

    assert await engine.handle(call("k", context=ctx("alice", "A"), policy=policy), tool) == ok(
        "run 1"
    )
    assert await engine.handle(call("k", context=ctx("alice", "B"), policy=policy), tool) == ok(
        "run 2"
    )
    assert await engine.handle(call("k", context=ctx("bob", "A"), policy=policy), tool) == ok(
        "run 3"
    )
    assert await engine.handle(call("k", context=ctx("alice", "A"), policy=policy), tool) == ok(
        "run 1"
    )
    for missing in (ctx("alice", None), ctx(None, "A")):
        refused = await engine.handle(call("k", context=missing, policy=policy), tool)
        assert dtype(refused) == "idempotency_scope_unavailable"
    assert tool.calls == 3


def _explodes(ctx: CallContext) -> str:
    raise RuntimeError("scope backend down")


def _empty(ctx: CallContext) -> str:
    return ""


def _not_a_string(ctx: CallContext) -> str:
    return 42  # type: ignore[return-value]


def _refuses_without_key(ctx: CallContext) -> str:
    raise ScopeUnavailableError("nope")


@pytest.mark.parametrize("strategy", [_explodes, _empty, _not_a_string, _refuses_without_key])
async def test_custom_scope_failures_refuse_and_do_not_run(
    engine: Engine, strategy: Callable[[CallContext], str]
) -> None:
    tool = Tool()
    answer = await engine.handle(call("k", policy=Policy.of(scope=strategy)), tool)
    assert data(answer) == {
        "type": "idempotency_scope_unavailable",
        "idempotencyKey": "k",
        "notProcessed": True,
    }
    assert tool.calls == 0


async def test_scope_values_reach_the_store_hashed(store: MemoryStore) -> None:
    wrap = Wrap(store)
    engine = Engine(wrap, registry=Registry())
    await engine.handle(call("k", context=http("alice-secret-subject")), Tool())
    await engine.handle(call("k", context=http("bob")), Tool())
    (scope_a, key_a), (scope_b, _) = wrap.claims
    assert key_a == "k"
    assert "alice" not in scope_a
    assert len(scope_a) == 64 and int(scope_a, 16) >= 0
    assert scope_a != scope_b


# --------------------------------------------------------------------------------------------
# cancellation
# --------------------------------------------------------------------------------------------


async def test_cancelled_caller_still_records_the_outcome(engine: Engine) -> None:
    started, release = anyio.Event(), anyio.Event()
    finished: list[Outcome] = []

    async def tool() -> Outcome:
        started.set()
        await release.wait()
        out = ok("charged once")
        finished.append(out)
        return out

    scopes: list[anyio.CancelScope] = []

    async def caller() -> None:
        with anyio.CancelScope() as cs:
            scopes.append(cs)
            await engine.handle(call("k"), tool)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(caller)
            await started.wait()
            scopes[0].cancel()  # the client cancelled / disconnected
            for _ in range(5):
                await anyio.lowlevel.checkpoint()
            assert not finished
            release.set()
    assert finished == [ok("charged once")]
    retry = Tool()
    assert await engine.handle(call("k"), retry) == ok("charged once")
    assert retry.calls == 0


async def test_native_task_cancel_still_records_the_outcome(engine: Engine) -> None:
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        started.set()
        await release.wait()
        return ok("charged once")

    task = asyncio.ensure_future(engine.handle(call("k"), tool))
    await started.wait()
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
    with anyio.fail_after(5):  # the cancelled caller stopped waiting; the call goes on
        while engine.executing:
            await asyncio.sleep(0.01)
    retry = Tool()
    assert await engine.handle(call("k"), retry) == ok("charged once")
    assert (runs, retry.calls) == (1, 0)


@pytest.mark.skipif(
    sys.version_info < (3, 12),
    reason="an eager task start (eager_start) needs Python 3.12: before it, an execution's "
    "task starts on the loop's next iteration (engine/runtime.py)",
)
async def test_a_call_that_never_suspends_is_answered_without_yielding_to_the_loop(
    engine: Engine,
) -> None:
    # Eager start: the execution's task runs its first step at once, so a call that never
    # suspends is over before anything else on the loop runs (no task switch, no shield).
    loop = asyncio.get_running_loop()
    caller = asyncio.current_task()
    ran_in: list[asyncio.Task[Any] | None] = []
    others: list[str] = []

    async def tool() -> Outcome:
        ran_in.append(asyncio.current_task())
        return ok("at once")

    loop.call_soon(others.append, "ran")
    assert await engine.handle(call("k"), tool) == ok("at once")
    assert others == []  # the loop never got control
    assert ran_in[0] is not caller  # still a task of its own, as a cancellation guard needs
    assert engine.executing == 0
    assert await engine.handle(call("k"), Tool()) == ok("at once")


LEAKED: contextvars.ContextVar[str] = contextvars.ContextVar("leaked", default="caller's")


@pytest.mark.parametrize("suspends", [False, True])
async def test_the_execution_runs_in_its_own_task_and_context(
    engine: Engine, suspends: bool
) -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[Any] | None] = []

    async def tool() -> Outcome:
        LEAKED.set("tool's")
        seen.append(asyncio.current_task())
        if suspends:
            await asyncio.sleep(0)
            seen.append(asyncio.current_task())
        return ok(LEAKED.get())

    assert await engine.handle(call("k"), tool) == ok("tool's")
    assert LEAKED.get() == "caller's"  # the tool's context was a copy, as in any task
    assert caller not in seen and len(set(map(id, seen))) == 1


async def test_scopes_opened_before_the_first_suspension_belong_to_the_execution(
    engine: Engine,
) -> None:
    # What the eager start must not break: an anyio cancel scope (and an asyncio timeout)
    # entered in the first step and exited after a suspension, while the caller is cancelled
    # natively in between. Entered in the caller's task, anyio would refuse the exit.
    started, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        # mypy reads the tests as Python 3.10 (no `asyncio.timeout`): the version check guards it
        timeout = asyncio.timeout(10) if sys.version_info >= (3, 11) else contextlib.nullcontext()  # type: ignore[attr-defined]
        with anyio.fail_after(10):
            async with timeout:
                started.set()
                await release.wait()
        return ok("charged once")

    task = asyncio.ensure_future(engine.handle(call("k"), tool))
    await started.wait()
    task.cancel()
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
    assert task.cancelled()
    with anyio.fail_after(5):
        while engine.executing:
            await asyncio.sleep(0.01)
    retry = Tool()
    assert await engine.handle(call("k"), retry) == ok("charged once")
    assert (runs, retry.calls) == (1, 0)


# --------------------------------------------------------------------------------------------
# store failures
# --------------------------------------------------------------------------------------------


async def test_store_full_refuses_and_does_not_run(clock: Clock) -> None:
    engine = Engine(MemoryStore(max_records=1, clock=clock), registry=Registry())
    tool = Tool()
    assert await engine.handle(call("a"), tool) == ok("run 1")
    full = await engine.handle(call("b"), tool)
    assert data(full) == {
        "type": "idempotency_store_full",
        "idempotencyKey": "b",
        "notProcessed": True,
    }
    assert full.error is not None
    assert full.error["code"] == ErrorCodes().idempotency_store_full
    assert tool.calls == 1
    assert await engine.handle(call("a"), tool) == ok("run 1")  # never evicted to make room
    clock.advance(RETENTION + 1)
    assert await engine.handle(call("b"), tool) == ok("run 2")


class ClaimFails(Wrap):
    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        raise ConnectionError("store down")


async def test_store_unavailable_refuses_and_does_not_run(store: MemoryStore) -> None:
    engine = Engine(ClaimFails(store), registry=Registry())
    tool = Tool()
    answer = await engine.handle(call("k"), tool)
    assert data(answer) == {
        "type": "idempotency_store_unavailable",
        "idempotencyKey": "k",
        "notProcessed": True,
    }
    assert answer.error is not None
    assert answer.error["code"] == ErrorCodes().idempotency_store_unavailable
    assert tool.calls == 0
    assert engine.stats.store_errors == 1


class ClaimRefusedByStore(Wrap):
    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        # Stores raise their own typed refusal without the client's key (they never see it raw).
        raise StoreUnavailableError("SQLite store 'x.db' failed: database is locked")


async def test_store_refusal_echoes_the_clients_key(store: MemoryStore) -> None:
    engine = Engine(ClaimRefusedByStore(store), registry=Registry())
    answer = await engine.handle(call("k-echo"), Tool())
    assert data(answer) == {
        "type": "idempotency_store_unavailable",
        "idempotencyKey": "k-echo",
        "notProcessed": True,
    }


class CompleteFails(Wrap):
    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        raise ConnectionError("store went away")


async def test_store_failing_on_complete_still_answers(store: MemoryStore, clock: Clock) -> None:
    engine = Engine(CompleteFails(store), registry=Registry())
    tool = Tool()
    assert await engine.handle(call("k"), tool) == ok("run 1")
    assert engine.stats.record_failures == 1
    # the claim is left to its lease: in progress until it runs out, then the key is free
    assert dtype(await engine.handle(call("k"), tool)) == "idempotency_key_in_progress"
    assert tool.calls == 1
    clock.advance(LEASE + 1)
    assert await engine.handle(call("k"), tool) == ok("run 2")


async def test_non_final_outcome_releases_the_claim(engine: Engine, store: MemoryStore) -> None:
    pending = Outcome(
        result={"inputRequests": {"x": {}}, "resultType": "input_required"}, final=False
    )
    tool = Tool(pending)
    assert await engine.handle(call("k"), tool) == pending
    assert engine.stats.released == 1
    assert await store.get(await scope_of(store, STDIO), "k") is None
    assert await engine.handle(call("k"), tool) == pending
    assert tool.calls == 2


async def test_outcome_too_large_is_answered_once_then_refused(store: MemoryStore) -> None:
    engine = Engine(store, registry=Registry(), max_outcome_bytes=200)
    big = ok("x" * 1000)
    tool = Tool(big)
    assert await engine.handle(call("k"), tool) == big
    retry = await engine.handle(call("k"), tool)
    assert data(retry) == {"type": "idempotency_outcome_too_large", "idempotencyKey": "k"}
    assert retry.error is not None
    assert retry.error["code"] == ErrorCodes().idempotency_outcome_too_large
    assert tool.calls == 1
    small = Tool(ok("fits"))
    assert await engine.handle(call("k2"), small) == ok("fits")
    assert await engine.handle(call("k2"), small) == ok("fits")


class Scripted:
    """A store whose claim answers whatever the test put in it."""

    kind = "scripted"

    def __init__(self, answer: Claim) -> None:
        self.answer = answer

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim:
        return self.answer

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        raise AssertionError("not claimed")

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        raise AssertionError("not claimed")

    async def release(self, scope: str, key: str, owner: str) -> bool:
        raise AssertionError("not claimed")

    async def get(self, scope: str, key: str) -> Record | None:
        return self.answer.existing

    async def aclose(self) -> None:
        return None


FP = fingerprint("charge", {"amount": 10})


@pytest.mark.parametrize(
    "stored",
    [
        b"not json",
        b"",
        b"[]",
        b'{"v": 99, "result": {}}',
        b'{"v": 1}',
        b'{"v": 1, "result": {}, "error": {"code": 1, "message": "m"}}',
        b'{"v": 1, "error": {"code": "x", "message": "m"}}',
        b'{"v": 1, "result": [1]}',
        b"\xff\xfe",
        None,
    ],
)
async def test_corrupt_record_refused_and_not_run(stored: bytes | None) -> None:
    record = Record(Status.COMPLETED, FP, "someone", 100.0, stored)
    engine = Engine(Scripted(Claim(claimed=False, existing=record)), registry=Registry())
    tool = Tool()
    answer = await engine.handle(call("k"), tool)
    assert data(answer) == {"type": "idempotency_record_corrupt", "idempotencyKey": "k"}
    assert answer.error is not None
    assert answer.error["code"] == ErrorCodes().idempotency_record_corrupt
    assert tool.calls == 0


async def test_store_answering_nothing_is_refused_not_run() -> None:
    engine = Engine(Scripted(Claim(claimed=False, existing=None)), registry=Registry())
    tool = Tool()
    answer = await engine.handle(call("k"), tool)
    assert dtype(answer) == "idempotency_record_corrupt"
    assert tool.calls == 0


async def test_a_raising_run_is_answered_as_an_error_and_not_run_twice(engine: Engine) -> None:
    runs = 0

    async def broken() -> Outcome:
        nonlocal runs
        runs += 1
        raise RuntimeError("adapter bug")

    first = await engine.handle(call("k"), broken)
    assert first.error is not None and first.error["code"] == -32603
    assert await engine.handle(call("k"), broken) == first
    assert runs == 1


@pytest.mark.parametrize(
    "value", [2**64, -(2**63) - 1, "\ud800"], ids=["2**64", "-2**63-1", "lone"]
)
async def test_outcomes_holding_any_json_value_are_replayed(
    engine: Engine, clock: Clock, value: Any
) -> None:
    tool = Tool(ok("x", structuredContent={"value": value}))
    first = await engine.handle(call("k"), tool)
    clock.advance(LEASE + 1)
    assert await engine.handle(call("k"), tool) == first
    assert tool.calls == 1


async def test_too_large_refusal_is_recorded_for_keys_with_lone_surrogates(
    store: MemoryStore, clock: Clock
) -> None:
    engine = Engine(store, registry=Registry(), max_outcome_bytes=100)
    key = "\ud800" + "k" * 10  # a valid key: a JSON string of 1..255 characters
    tool = Tool(ok("x" * 500))
    await engine.handle(call(key), tool)
    clock.advance(LEASE + 1)
    retry = await engine.handle(call(key), tool)
    assert dtype(retry) == "idempotency_outcome_too_large"
    assert tool.calls == 1


# --------------------------------------------------------------------------------------------
# replay marker
# --------------------------------------------------------------------------------------------


async def test_mark_replays(store: MemoryStore) -> None:
    engine = Engine(store, registry=Registry(), mark_replays=True)
    original = ok("x", _meta={"progressToken": 7})
    tool = Tool(original)
    first = await engine.handle(call("k"), tool)
    assert first == original
    assert first.result is not None and REPLAY_META_KEY not in first.result["_meta"]
    replay = await engine.handle(call("k"), tool)
    assert replay.result is not None
    assert replay.result["_meta"] == {"progressToken": 7, REPLAY_META_KEY: True}
    assert replay.result["content"] == original.result["content"]  # type: ignore[index]
    assert REPLAY_META_KEY == "io.github.idemtools/replayed"
    # error outcomes have no result to mark
    failing = Outcome.of_error(-32000, "no")
    await engine.handle(call("e"), Tool(failing))
    assert await engine.handle(call("e"), Tool()) == failing


async def test_replays_unmarked_by_default(engine: Engine) -> None:
    tool = Tool()
    await engine.handle(call("k"), tool)
    replay = await engine.handle(call("k"), tool)
    assert replay.result is not None and "_meta" not in replay.result


# --------------------------------------------------------------------------------------------
# concurrency
# --------------------------------------------------------------------------------------------


async def test_200_concurrent_calls_one_execution(engine: Engine) -> None:
    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        return ok("the one")

    results: list[Outcome] = []

    async def one() -> None:
        await anyio.lowlevel.checkpoint()
        results.append(await engine.handle(call("k"), tool))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(one)
    assert runs == 1
    assert len(results) == 200
    kinds = {"replay" if r == ok("the one") else dtype(r) for r in results}
    assert kinds <= {"replay", "idempotency_key_in_progress"}
    assert sum(1 for r in results if dtype(r) == "idempotency_key_in_progress") > 0
    assert sum(1 for r in results if r == ok("the one")) >= 1


# --------------------------------------------------------------------------------------------
# transactional stores
# --------------------------------------------------------------------------------------------


class Transactional(Wrap):
    """A minimal TransactionalStore: `complete` inside `execution` is written at commit only.

    A failed commit keeps nothing, as a database rollback would: the claim stays in progress
    (for the engine to release).
    """

    kind = "tx"

    def __init__(self, inner: MemoryStore, *, fail_commit: bool) -> None:
        super().__init__(inner)
        self.fail_commit = fail_commit
        self._pending: list[tuple[str, str, str, bytes, float]] | None = None

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool:
        if self._pending is None:
            return await super().complete(
                scope, key, owner, outcome, retention, fingerprint=fingerprint
            )
        self.events.append("complete")
        self._pending.append((scope, key, owner, outcome, retention))
        return True

    @asynccontextmanager
    async def _execution(self) -> AsyncIterator[None]:
        self.events.append("enter")
        self._pending = []
        try:
            yield
            self.events.append("commit")
            if self.fail_commit:
                raise ConnectionError("commit failed")
            for pending in self._pending:
                assert await self.inner.complete(*pending)
        finally:
            self._pending = None

    def execution(self, scope: str, key: str, owner: str) -> Any:
        return self._execution()


TX_POLICY = Policy.of(retention=RETENTION, lease=LEASE, transactional=True)


async def test_transactional_store_commits_the_record_inside(store: MemoryStore) -> None:
    tx = Transactional(store, fail_commit=False)
    assert isinstance(tx, TransactionalStore)
    engine = Engine(tx, registry=Registry())
    tool = Tool()
    assert await engine.handle(call("k", policy=TX_POLICY), tool) == ok("run 1")
    assert tx.events == ["enter", "complete", "commit"]
    assert await engine.handle(call("k", policy=TX_POLICY), tool) == ok("run 1")
    assert tool.calls == 1


async def test_failed_commit_is_store_unavailable_and_releases(store: MemoryStore) -> None:
    tx = Transactional(store, fail_commit=True)
    engine = Engine(tx, registry=Registry())
    tool = Tool()
    answer = await engine.handle(call("k", policy=TX_POLICY), tool)
    assert data(answer) == {
        "type": "idempotency_store_unavailable",
        "idempotencyKey": "k",
    }  # the tool ran: no notProcessed
    assert tx.events[:3] == ["enter", "complete", "commit"]
    assert "release" in tx.events[3:]
    assert engine.stats.record_failures == 1
    # nothing was kept: the key is free and a retry runs the tool again
    assert await store.get(tx.claims[0][0], "k") is None
    tx.fail_commit = False
    assert await engine.handle(call("k", policy=TX_POLICY), tool) == ok("run 2")


async def test_transactional_policy_on_a_plain_store_runs_normally(engine: Engine) -> None:
    tool = Tool()
    assert await engine.handle(call("k", policy=TX_POLICY), tool) == ok("run 1")
    assert await engine.handle(call("k", policy=TX_POLICY), tool) == ok("run 1")


class Undoable(Transactional):
    """A TransactionalStore whose `execution` yields `ToolWrites`: it logs the rollbacks."""

    @asynccontextmanager
    async def _undoable(self) -> AsyncIterator[Any]:
        store = self

        class Writes:
            async def rollback(self) -> None:
                store.events.append("rollback")

        async with self._execution():
            yield Writes()

    def execution(self, scope: str, key: str, owner: str) -> Any:
        return self._undoable()


@pytest.mark.parametrize(
    ("outcome", "rolled_back"),
    [
        (ok("paid"), False),
        (Outcome(result={"content": [], "isError": True}), True),
        (Outcome.of_error(-32603, "tool crashed"), True),
        (Outcome(result={"resultType": "input_required"}, final=False), True),
    ],
    ids=["success", "isError", "jsonrpc-error", "not-final"],
)
async def test_a_failed_transactional_call_rolls_its_writes_back(
    store: MemoryStore, outcome: Outcome, rolled_back: bool
) -> None:
    """Its writes are undone before its (error) record is written in the same transaction."""
    tx = Undoable(store, fail_commit=False)
    engine = Engine(tx, registry=Registry())
    tool = Tool(outcome)
    await engine.handle(call("k", policy=TX_POLICY), tool)
    recorded = "release" if not outcome.final else "complete"
    expected = ["enter", "rollback", recorded, "commit"] if rolled_back else ["enter", recorded]
    assert [e for e in tx.events if e in ("enter", "rollback", "complete", "release", "commit")][
        : len(expected)
    ] == expected, tx.events
    assert ("rollback" in tx.events) == rolled_back
    if outcome.final:  # the outcome is replayed: the tool does not run again
        assert await engine.handle(call("k", policy=TX_POLICY), tool) == outcome
        assert tool.calls == 1
