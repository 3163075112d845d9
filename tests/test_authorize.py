"""`authorize=`: a replay is never an authorization bypass (SEP-3182 Security).

Driven through `Engine.handle` with a MemoryStore behind a spy, so each test can tell whether a
record was read or written, not only what the caller got.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemtools import (
    AuthInfo,
    CallContext,
    Engine,
    ErrorCodes,
    Outcome,
    Policy,
    Registry,
    UnauthorizedError,
    idempotent,
)
from idemtools.engine import ToolCall
from idemtools.errors import error_from_data
from idemtools.stores import MemoryStore
from tests.budget import examples

SECRET = "alice lacks balance:read (role=intern, ticket 4711)"


class Spy:
    """A MemoryStore that records which operations the engine asked of it."""

    kind = "spy"

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.ops: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name in ("claim", "renew", "complete", "release", "get"):

            async def recorded(*args: Any, **kwargs: Any) -> Any:
                self.ops.append(name)
                return await attr(*args, **kwargs)

            return recorded
        return attr


def ctx(*scopes: str, subject: str = "alice") -> CallContext:
    auth = AuthInfo(issuer="https://as.example", subject=subject, scopes=scopes)
    return CallContext(transport="http", auth=auth, tool="balance", arguments={})


class Tool:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> Outcome:
        self.calls += 1
        return Outcome(result={"content": [{"type": "text", "text": f"balance 42 #{self.calls}"}]})


def needs(scope: str) -> Any:
    def check(context: CallContext) -> None:
        if context.auth is None or scope not in context.auth.scopes:
            raise PermissionError(SECRET)

    return check


def needs_async(scope: str) -> Any:
    sync = needs(scope)

    async def check(context: CallContext) -> None:
        sync(context)

    return check


def keyed(context: CallContext, policy: Policy | None, key: str = "k") -> ToolCall:
    return ToolCall(name="balance", arguments={}, key=key, context=context, policy=policy)


@pytest.mark.parametrize("make", [needs, needs_async], ids=["sync", "async"])
async def test_revoked_permission_is_refused_before_the_replay(make: Any) -> None:
    spy = Spy()
    engine = Engine(spy, registry=Registry())  # type: ignore[arg-type]
    policy = Policy.of(authorize=make("balance:read"))
    tool = Tool()
    first = await engine.handle(keyed(ctx("mcp", "balance:read"), policy), tool)
    assert first.result is not None
    spy.ops.clear()
    # same subject, new token without the permission, the old key: no replay
    refused = await engine.handle(keyed(ctx("mcp"), policy), tool)
    assert refused.error is not None and refused.error["data"]["type"] == "idempotency_unauthorized"
    assert refused.error["code"] == ErrorCodes().idempotency_unauthorized
    assert SECRET not in str(refused.error)  # the check's message stays on the server
    assert "balance 42" not in str(refused.error)
    assert spy.ops == []  # no record read into the answer, none written
    assert tool.calls == 1
    # a fresh key is refused the same way, and the tool does not run
    fresh = await engine.handle(keyed(ctx("mcp"), policy, key="k2"), tool)
    assert fresh.error is not None and fresh.error["data"]["type"] == "idempotency_unauthorized"
    assert tool.calls == 1 and spy.ops == []
    # permission back: the recorded answer again, still one execution
    again = await engine.handle(keyed(ctx("mcp", "balance:read"), policy), tool)
    assert again.result == first.result and tool.calls == 1


async def test_the_check_runs_before_every_replay_and_execution() -> None:
    seen: list[tuple[str | None, tuple[str, ...], Any]] = []

    def check(context: CallContext) -> None:
        assert context.auth is not None
        seen.append((context.tool, context.auth.scopes, context.auth.token))

    token = object()
    context = CallContext(
        transport="http",
        auth=AuthInfo(subject="alice", scopes=("mcp",), token=token),
        tool="balance",
    )
    engine = Engine(MemoryStore(), registry=Registry())
    policy = Policy.of(authorize=check)  # type: ignore[arg-type]
    tool = Tool()
    for _ in range(3):
        await engine.handle(keyed(context, policy), tool)
    assert tool.calls == 1
    assert seen == [("balance", ("mcp",), token)] * 3  # raw token reaches the check


async def test_the_server_wide_default_applies_unless_the_tool_declares_its_own() -> None:
    engine = Engine(MemoryStore(), registry=Registry(), authorize=needs("admin"))
    tool = Tool()
    plain = await engine.handle(keyed(ctx("mcp"), None), tool)
    assert plain.error is not None and plain.error["data"]["type"] == "idempotency_unauthorized"
    own = Policy.of(authorize=needs("balance:read"))
    allowed = await engine.handle(keyed(ctx("balance:read"), own, key="k2"), tool)
    assert allowed.result is not None and tool.calls == 1


async def test_a_refusal_is_logged_on_the_server_with_its_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = Engine(MemoryStore(), registry=Registry())
    with caplog.at_level(logging.INFO, logger="idemtools"):
        await engine.handle(keyed(ctx(), Policy.of(authorize=needs("x")), key="raw-key-1"), Tool())
    text = caplog.text
    assert SECRET in text and "idempotency_unauthorized" in text
    assert "raw-key-1" not in text


def test_authorize_must_be_callable() -> None:
    with pytest.raises(TypeError):
        Policy.of(authorize="admin")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        idempotent(authorize=42, registry=Registry())  # type: ignore[call-overload]


def test_the_decorator_records_the_check() -> None:
    registry = Registry()
    check = needs("balance:read")

    @idempotent(authorize=check, registry=registry)
    def balance() -> int:
        return 42

    policy = registry.get("balance")
    assert policy is not None and policy.authorize is check


def test_clients_rebuild_the_typed_error() -> None:
    refused = error_from_data("no", {"type": "idempotency_unauthorized", "idempotencyKey": "k"})
    assert isinstance(refused, UnauthorizedError) and refused.key == "k"


async def test_no_check_costs_nothing_extra() -> None:
    # the common case: no authorize anywhere; the engine never builds or awaits anything
    engine = Engine(MemoryStore(), registry=Registry())
    assert engine.authorize is None and Policy.of().authorize is None
    tool = Tool()
    first = await engine.handle(keyed(ctx(), Policy.of()), tool)
    assert first.result is not None and tool.calls == 1


@pytest.mark.parametrize("answer", [False, True, None])
async def test_a_check_that_returns_false_refuses(answer: bool | None) -> None:
    def check(context: CallContext) -> bool | None:
        return answer

    async def acheck(context: CallContext) -> bool | None:
        return answer

    for fn in (check, acheck):
        engine = Engine(MemoryStore(), registry=Registry())
        tool = Tool()
        # A wrong answer type on purpose: what a careless hook returns at run time.
        outcome = await engine.handle(keyed(ctx(), Policy.of(authorize=fn)), tool)  # type: ignore[arg-type]
        if answer is False:
            assert outcome.error is not None
            assert outcome.error["data"]["type"] == "idempotency_unauthorized"
            assert tool.calls == 0
        else:
            assert outcome.result is not None and tool.calls == 1


# -- only True and None allow --------------------------------------------

# Values a check might return besides True/None/False: "the matching grants" (empty or not),
# counts, strings, objects. Every one of them refuses: only True and None allow.
_OTHER_ANSWERS = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.integers(), max_size=3),
    st.tuples(st.integers()),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sets(st.integers(), max_size=2),
    st.builds(object),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=_OTHER_ANSWERS, is_async=st.booleans())
async def test_any_answer_but_true_or_none_refuses_and_names_the_check(
    answer: object, is_async: bool
) -> None:
    def grants(context: CallContext) -> object:
        return answer

    async def agrants(context: CallContext) -> object:
        return answer

    fn = agrants if is_async else grants
    spy = Spy()
    engine = Engine(spy, registry=Registry())  # type: ignore[arg-type]
    tool = Tool()
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    logger = logging.getLogger("idemtools")
    logger.addHandler(handler)
    try:
        # A wrong answer type on purpose: what a careless hook returns at run time.
        outcome = await engine.handle(keyed(ctx(), Policy.of(authorize=fn)), tool)  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
    assert outcome.error is not None
    assert outcome.error["data"]["type"] == "idempotency_unauthorized"
    assert tool.calls == 0 and spy.ops == [], "nothing ran, no record was read"
    errors = [r.getMessage() for r in records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert fn.__name__ in errors[0] and type(answer).__name__ in errors[0]


@pytest.mark.parametrize("answer", [0, "", [], (), {}, 0.0, set()], ids=repr)
async def test_falsy_answers_refuse_replays_too(answer: object) -> None:
    allow = True

    def check(context: CallContext) -> object:
        return None if allow else answer

    engine = Engine(MemoryStore(), registry=Registry())
    tool = Tool()
    policy = Policy.of(authorize=check)  # type: ignore[arg-type]
    first = await engine.handle(keyed(ctx(), policy), tool)
    assert first.result is not None and tool.calls == 1
    allow = False
    again = await engine.handle(keyed(ctx(), policy), tool)
    assert again.error is not None and again.error["data"]["type"] == "idempotency_unauthorized"
    assert not again.replayed
