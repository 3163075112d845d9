"""`@idempotent`, `Policy`, `policy_of` and `Registry`."""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from idemtools import (
    DEFAULT_POLICY,
    CallContext,
    Policy,
    PolicyConflictError,
    Registry,
    Scope,
    by_auth_subject,
    default_registry,
    idempotent,
    policy_of,
    shared,
)
from idemtools.server.adapters import SDK2
from tests.budget import examples


@pytest.fixture(autouse=True)
def _restore_default_registry() -> Iterator[None]:
    """Bare `@idempotent` registers in the process-wide registry; leave it as we found it."""
    saved = dict(default_registry._policies), dict(default_registry._entries)
    yield
    default_registry._policies.clear()
    default_registry._policies.update(saved[0])
    default_registry._entries.clear()
    default_registry._entries.update(saved[1])


# --------------------------------------------------------------------------------------------
# the decorator returns the function itself
# --------------------------------------------------------------------------------------------


def test_bare_on_sync_returns_the_same_function() -> None:
    def charge_sync_bare(amount: int) -> str:
        return f"charged {amount}"

    original_signature = inspect.signature(charge_sync_bare)
    decorated = idempotent(charge_sync_bare)
    assert decorated is charge_sync_bare
    assert decorated(3) == "charged 3"
    assert inspect.signature(decorated) == original_signature
    assert "charge_sync_bare" in default_registry
    policy = default_registry.get("charge_sync_bare")
    assert policy is not None
    assert policy_of(charge_sync_bare) == policy
    assert policy == DEFAULT_POLICY.with_name("charge_sync_bare")


async def test_bare_on_async_returns_the_same_coroutine_function() -> None:
    @idempotent
    async def charge_async_bare(amount: int) -> str:
        return f"charged {amount}"

    assert inspect.iscoroutinefunction(charge_async_bare)
    assert await charge_async_bare(4) == "charged 4"
    assert charge_async_bare.__name__ == "charge_async_bare"
    assert "charge_async_bare" in default_registry


@pytest.mark.parametrize("is_async", [False, True])
def test_with_options_returns_the_same_function(is_async: bool) -> None:
    registry = Registry()

    def plain(x: int) -> int:
        return x

    async def coro(x: int) -> int:
        return x

    fn: Callable[..., Any] = coro if is_async else plain
    decorated = idempotent(
        retention=timedelta(hours=2), lease=timedelta(seconds=5), scope=shared, registry=registry
    )(fn)
    assert decorated is fn
    assert inspect.iscoroutinefunction(decorated) is is_async
    policy = registry.get(fn.__name__)
    assert policy == Policy(retention=7200.0, lease=5.0, scope=shared, name=fn.__name__)
    assert policy_of(fn) == policy
    assert fn.__name__ not in default_registry  # only in the registry it was given


def test_name_option_registers_under_that_name() -> None:
    registry = Registry()

    @idempotent(name="payments.charge", registry=registry)
    def charge_v2(amount: int) -> None:
        return None

    assert list(registry) == ["payments.charge"]
    assert "charge_v2" not in registry
    policy = policy_of(charge_v2)
    assert policy is not None and policy.name == "payments.charge"
    assert registry.get("payments.charge") == policy


def test_options_use_the_default_registry_when_none_given() -> None:
    @idempotent(retention=60)
    def opt_default_registry() -> None:
        return None

    policy = default_registry.get("opt_default_registry")
    assert policy is not None and policy.retention == 60.0


def test_seconds_and_timedeltas_are_equivalent() -> None:
    assert Policy.of(retention=90, lease=1.5) == Policy.of(
        retention=timedelta(seconds=90), lease=timedelta(milliseconds=1500)
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"retention": 0},
        {"retention": -1},
        {"retention": timedelta(0)},
        {"retention": timedelta(seconds=-5)},
        {"retention": math.nan},
        {"lease": 0},
        {"lease": -0.5},
        {"lease": timedelta(0)},
        {"lease": math.nan},
    ],
)
def test_non_positive_durations_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy.of(**bad)
    with pytest.raises(ValueError):
        idempotent(registry=Registry(), **bad)


def test_refused_options_register_nothing() -> None:
    registry = Registry()
    with pytest.raises(ValueError):

        @idempotent(lease=0, registry=registry)
        def never_registered() -> None:
            return None

    assert len(registry) == 0


def test_non_callable_positional_argument_refused() -> None:
    with pytest.raises(TypeError):
        idempotent(42)  # type: ignore[call-overload]  # deliberately not a callable


def test_callable_without_name_needs_name() -> None:
    registry = Registry()
    partial = functools.partial(lambda a, b: a + b, 1)
    with pytest.raises(TypeError):
        idempotent(registry=registry)(partial)
    assert idempotent(name="adder", registry=registry)(partial) is partial
    assert "adder" in registry


def test_plain_function_scopes_are_wrapped() -> None:
    def by_tenant(ctx: CallContext) -> str:
        return "tenant"

    policy = Policy.of(scope=by_tenant)
    assert isinstance(policy.scope, Scope)
    assert policy.scope(CallContext()) == '["custom", "tenant"]'  # namespaced
    assert Policy.of(scope=shared).scope is shared
    assert Policy.of().scope is by_auth_subject


def test_defaults() -> None:
    assert DEFAULT_POLICY.retention == 24 * 3600
    assert DEFAULT_POLICY.lease > 0
    assert DEFAULT_POLICY.scope is by_auth_subject
    assert DEFAULT_POLICY.transactional is False


# --------------------------------------------------------------------------------------------
# policy_of
# --------------------------------------------------------------------------------------------


def test_policy_of_follows_wrapped() -> None:
    registry = Registry()

    @idempotent(name="inner", registry=registry)
    def inner() -> int:
        return 1

    @functools.wraps(inner)
    def outer() -> int:
        return inner()

    @functools.wraps(outer)
    def outermost() -> int:
        return outer()

    assert policy_of(outermost) == registry.get("inner")


@pytest.mark.parametrize("thing", [None, 42, "name", print, lambda: None])
def test_policy_of_undecorated_is_none(thing: object) -> None:
    assert policy_of(thing) is None


def test_policy_of_ignores_a_foreign_attribute() -> None:
    def f() -> None:
        return None

    f.__idemtools_policy__ = "not a policy"  # type: ignore[attr-defined]
    assert policy_of(f) is None


def test_policy_of_survives_a_wrapped_cycle() -> None:
    def a() -> None:
        return None

    def b() -> None:
        return None

    a.__wrapped__ = b  # type: ignore[attr-defined]
    b.__wrapped__ = a  # type: ignore[attr-defined]
    assert policy_of(a) is None


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def test_registry_semantics() -> None:
    registry = Registry()
    assert len(registry) == 0
    assert registry.get("t") is None
    assert "t" not in registry
    first = Policy.of(retention=10)
    registry.register("t", first)
    registry.register("a", Policy.of(retention=20))
    assert "t" in registry
    assert 5 not in registry
    assert len(registry) == 2
    assert list(registry) == ["a", "t"]  # sorted
    got = registry.get("t")
    assert got is not None and got.name == "t" and got.retention == 10.0
    assert first.name is None  # the registered copy is named; the given policy is untouched
    # later registrations of a name replace earlier ones
    registry.register("t", Policy.of(retention=30))
    got = registry.get("t")
    assert got is not None and got.retention == 30.0
    assert len(registry) == 2
    assert [name for name, _ in registry.items()] == ["a", "t"]
    assert all(policy.name == name for name, policy in registry.items())


def test_registries_are_independent() -> None:
    a, b = Registry(), Registry()

    @idempotent(registry=a)
    def only_in_a() -> None:
        return None

    assert "only_in_a" in a
    assert "only_in_a" not in b
    assert "only_in_a" not in default_registry


def test_registry_is_thread_safe() -> None:
    registry = Registry()

    def worker(n: int) -> None:
        for i in range(200):
            registry.register(f"t{n}-{i}", Policy())

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(registry) == 8 * 200


def test_redecorating_replaces_the_policy() -> None:
    registry = Registry()

    def tool() -> None:
        return None

    idempotent(retention=10, registry=registry)(tool)
    idempotent(retention=20, registry=registry)(tool)
    policy = policy_of(tool)
    assert policy is not None and policy.retention == 20.0
    assert registry.get("tool") == policy


# --------------------------------------------------------------------------------------------
# stacking with the SDK's @tool(): the input schema is the same in either order
# --------------------------------------------------------------------------------------------


def _server() -> Any:
    if SDK2:  # mcp 2.x
        from mcp.server.mcpserver import MCPServer

        return MCPServer("schema-test")
    else:
        from mcp.server.fastmcp import FastMCP  # mcp 1.x

        return FastMCP("schema-test")


def _tool_info(server: Any, name: str) -> tuple[Any, Any]:
    tool = server._tool_manager.get_tool(name)
    assert tool is not None, f"{name} was not registered"
    return tool.parameters, tool.description


def _sync_variants() -> list[Callable[..., Any]]:
    def make() -> Callable[..., Any]:
        def transfer(
            amount: Annotated[int, Field(ge=1, description="cents")],
            to: str,
            memo: str | None = None,
            tags: list[str] | None = None,
        ) -> dict[str, Any]:
            """Move money."""
            return {"amount": amount, "to": to}

        return transfer

    return [make(), make(), make()]


def _async_variants() -> list[Callable[..., Any]]:
    def make() -> Callable[..., Any]:
        async def transfer(
            amount: Annotated[int, Field(ge=1, description="cents")],
            to: str,
            memo: str | None = None,
            tags: list[str] | None = None,
        ) -> dict[str, Any]:
            """Move money."""
            return {"amount": amount, "to": to}

        return transfer

    return [make(), make(), make()]


@pytest.mark.parametrize("variants", [_sync_variants, _async_variants], ids=["sync", "async"])
@pytest.mark.parametrize("bare", [True, False], ids=["bare", "options"])
def test_decorator_order_does_not_change_the_schema(
    variants: Callable[[], list[Callable[..., Any]]], bare: bool
) -> None:
    undecorated, idem_below, idem_above = variants()
    registry = Registry()

    def idem(fn: Callable[..., Any]) -> Callable[..., Any]:
        if bare:
            return idempotent(fn)
        return idempotent(retention=timedelta(minutes=5), scope=shared, registry=registry)(fn)

    twin_server, below_server, above_server = _server(), _server(), _server()
    twin_server.tool()(undecorated)
    # @server.tool() over @idempotent
    below_server.tool()(idem(idem_below))
    # @idempotent over @server.tool()
    above_result = idem(above_server.tool()(idem_above))

    expected = _tool_info(twin_server, "transfer")
    assert expected[0]["properties"]["amount"]["minimum"] == 1  # the schema is a real one
    assert _tool_info(below_server, "transfer") == expected
    assert _tool_info(above_server, "transfer") == expected
    assert policy_of(idem_below) is not None
    assert policy_of(above_result) is not None


# -- a wrong duration names the option and what it accepts ---------------------------

_ACCEPTS = "a datetime.timedelta or a number of seconds (int or float)"


@pytest.mark.parametrize("option", ["retention", "lease"])
@pytest.mark.parametrize("bad", ["24h", "60", None, True, False, [60], b"60", object()])
def test_wrong_duration_type_names_the_option(option: str, bad: object) -> None:
    wrong: dict[str, Any] = {option: bad}  # deliberately the wrong type: Any past the checker
    for build in (
        lambda: Policy.of(**wrong),
        lambda: idempotent(registry=Registry(), **wrong),
        lambda: Policy(**wrong),
    ):
        with pytest.raises(TypeError) as caught:
            build()
        message = str(caught.value)
        assert message.startswith(f"{option} must be {_ACCEPTS}, got {bad!r}")
        assert "could not convert" not in message
        if isinstance(bad, str):
            assert "timedelta(hours=24)" in message


@settings(max_examples=examples(200), deadline=None)
@given(
    st.sampled_from(["retention", "lease"]),
    st.one_of(
        st.floats(max_value=0) | st.just(math.inf) | st.just(math.nan),
        st.integers(max_value=0),
        st.timedeltas(max_value=timedelta(0)),
    ),
)
def test_non_positive_or_infinite_durations_name_the_option(option: str, bad: object) -> None:
    wrong: dict[str, Any] = {option: bad}
    with pytest.raises(ValueError) as caught:
        Policy.of(**wrong)
    assert str(caught.value).startswith(f"{option} must be a positive, finite duration")
    assert _ACCEPTS in str(caught.value)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.one_of(
        st.floats(min_value=1e-3, max_value=1e9),
        st.integers(1, 10**9),
        st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=3650)),
    )
)
def test_positive_durations_become_seconds(value: float | timedelta) -> None:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    assert Policy.of(retention=value).retention == seconds
    assert Policy(retention=value).retention == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("scope", ["shared", "by_auth_subject", 42, None])
def test_a_scope_that_is_not_a_strategy_is_refused_where_it_is_written(scope: object) -> None:
    with pytest.raises(TypeError, match=r"scope must be a Scope .* e\.g\. scope=idemtools\.shared"):
        idempotent(scope=scope)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="scope must be a Scope"):
        Policy(scope=scope)  # type: ignore[arg-type]


# -- max_runtime -----------------------------------------------------------


@pytest.mark.parametrize("bad", ["1h", "900", True, [60], b"60", object()])
def test_wrong_max_runtime_type_names_the_option(bad: object) -> None:
    for build in (
        lambda: Policy.of(max_runtime=bad),  # type: ignore[arg-type]
        lambda: idempotent(registry=Registry(), max_runtime=bad),  # type: ignore[call-overload]
        lambda: Policy(max_runtime=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError) as caught:
            build()
        assert str(caught.value).startswith(f"max_runtime must be {_ACCEPTS} or None, got")


@settings(max_examples=examples(100), deadline=None)
@given(
    st.one_of(
        st.floats(max_value=0) | st.just(math.inf) | st.just(math.nan),
        st.integers(max_value=0),
        st.timedeltas(max_value=timedelta(0)),
    )
)
def test_non_positive_or_infinite_max_runtime_is_refused(bad: object) -> None:
    with pytest.raises(ValueError) as caught:
        Policy.of(max_runtime=bad)  # type: ignore[arg-type]
    assert str(caught.value).startswith("max_runtime must be a positive, finite duration")


@settings(max_examples=examples(100), deadline=None)
@given(
    st.one_of(
        st.none(),
        st.floats(min_value=1e-3, max_value=1e9),
        st.integers(1, 10**9),
        st.timedeltas(min_value=timedelta(milliseconds=1), max_value=timedelta(days=3650)),
    )
)
def test_max_runtime_becomes_seconds_or_none(value: float | timedelta | None) -> None:
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, int):
        seconds = float(seconds)
    assert Policy.of(max_runtime=value).max_runtime == seconds
    assert Policy(max_runtime=value).max_runtime == seconds  # type: ignore[arg-type]
    registry = Registry()

    @idempotent(registry=registry, max_runtime=value)
    def tool() -> None: ...

    assert registry.get("tool").max_runtime == seconds  # type: ignore[union-attr]


def test_max_runtime_has_a_documented_default() -> None:
    from idemtools.policy import DEFAULT_MAX_RUNTIME

    assert DEFAULT_POLICY.max_runtime == DEFAULT_MAX_RUNTIME == 3600.0
    assert Policy.of().max_runtime == DEFAULT_MAX_RUNTIME


# -- one name, one function, in a name-keyed registry --------------------------


def _refund_v1(amount: int) -> str:
    return f"refunded {amount}"


def _refund_v2(amount: int) -> str:
    return f"refunded {amount} (v2)"


def _named(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def test_a_second_function_under_a_declared_name_with_another_policy_is_refused() -> None:
    # Before: the second declaration silently replaced the first, so a low-level server that
    # resolves "payments.refund" by name got the 120 s policy the other module declared.
    idempotent(name="payments.refund", retention=60)(_refund_v1)
    with pytest.raises(PolicyConflictError) as refused:
        idempotent(name="payments.refund", retention=120)(_refund_v2)
    message = str(refused.value)
    assert _named(_refund_v1) in message and _named(_refund_v2) in message
    assert "'payments.refund'" in message
    assert isinstance(refused.value, ValueError)  # a declaration error, like a bad option
    # A refused declaration changes nothing: the first policy stands, the second function has none.
    held = default_registry.get("payments.refund")
    assert held is not None and held.retention == 60.0
    assert policy_of(_refund_v2) is None


def test_two_functions_of_one_name_in_an_explicit_registry_are_refused() -> None:
    registry = Registry()

    def first() -> Callable[..., Any]:
        @idempotent(retention=60, registry=registry)
        def charge() -> None:
            return None

        return charge

    def second() -> Callable[..., Any]:
        @idempotent(scope=shared, registry=registry)
        def charge() -> None:
            return None

        return charge

    one = first()
    with pytest.raises(PolicyConflictError) as refused:
        second()
    assert "first.<locals>.charge" in str(refused.value)
    assert "second.<locals>.charge" in str(refused.value)
    assert registry.get("charge") == policy_of(one)


def test_an_equal_policy_under_one_name_is_not_a_conflict() -> None:
    registry = Registry()
    idempotent(name="refund", retention=60, registry=registry)(_refund_v1)
    idempotent(name="refund", retention=timedelta(seconds=60), registry=registry)(_refund_v2)
    assert policy_of(_refund_v1) == policy_of(_refund_v2) == registry.get("refund")


def test_another_authorize_check_is_another_policy() -> None:
    # Policy equality leaves `authorize` out; a swapped check would be a swapped permission.
    registry = Registry()
    idempotent(name="refund", authorize=lambda ctx: True, registry=registry)(_refund_v1)
    with pytest.raises(PolicyConflictError):
        idempotent(name="refund", authorize=lambda ctx: False, registry=registry)(_refund_v2)


def test_the_same_function_redecorated_by_a_factory_call_is_not_a_conflict() -> None:
    registry = Registry()

    def make(retention: int) -> Callable[..., Any]:
        @idempotent(name="made", retention=retention, registry=registry)
        def tool() -> None:
            return None

        return tool

    make(60)
    latest = make(120)  # a fixture or a server factory run twice: the same module:qualname
    assert registry.get("made") == policy_of(latest)


def test_reloading_a_module_with_a_changed_policy_is_not_a_conflict(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import sys

    source = tmp_path / "reloaded_tools.py"
    template = (
        "from idemtools import idempotent\n\n"
        "@idempotent(name='reloaded.tool', retention={retention})\n"
        "def tool() -> None:\n"
        "    return None\n"
    )
    source.write_text(template.format(retention=60), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reloaded_tools", raising=False)
    module = importlib.import_module("reloaded_tools")
    source.write_text(template.format(retention=7200), encoding="utf-8")
    importlib.invalidate_caches()
    try:
        module = importlib.reload(module)  # e.g. `mkdocs serve` rebuilding after an edit
        held = default_registry.get("reloaded.tool")
        assert held is not None and held.retention == 7200.0
        assert policy_of(module.tool) == held
    finally:
        sys.modules.pop("reloaded_tools", None)


def test_bare_same_named_tools_of_two_servers_each_keep_their_own_policy() -> None:
    # High-level servers find the policy on the function: two servers in one process with a
    # tool of the same name do not share or swap policies, and declaring them raises nothing.
    import anyio

    from idemtools import install

    def server_with_charge(retention: int) -> Any:
        server = _server()

        @server.tool()
        @idempotent(retention=retention)
        def charge(amount: int) -> str:
            return str(amount)

        install(server)
        return server

    first, second = server_with_charge(60), server_with_charge(7200)

    async def retention_of(server: Any) -> float:
        from idemtools.server.installation import installation_of

        installation = installation_of(server)
        assert installation is not None
        tools = {t.name: t for t in await installation.tools()}
        assert tools["charge"].own
        return tools["charge"].policy.retention

    assert anyio.run(retention_of, first) == 60.0
    assert anyio.run(retention_of, second) == 7200.0


def test_a_bare_function_does_not_displace_a_declared_name() -> None:
    # A low-level server's `@idempotent(name="charge")` keeps its entry when a high-level
    # module elsewhere decorates a bare `def charge` with another policy.
    registry_name = "charge_declared_here"
    idempotent(name=registry_name, retention=60)(_refund_v1)

    def make() -> Callable[..., Any]:
        @idempotent(retention=7200)
        def charge_declared_here() -> None:
            return None

        return charge_declared_here

    bare = make()
    held = default_registry.get(registry_name)
    assert held is not None and held.retention == 60.0
    own = policy_of(bare)
    assert own is not None and own.retention == 7200.0


def test_declared_tells_a_declared_name_from_a_bare_functions_fallback() -> None:
    registry = Registry()
    registry.register("registered", Policy.of(retention=10))
    idempotent(name="named", retention=20, registry=registry)(_refund_v1)
    assert [registry.declared(n) is not None for n in ("registered", "named")] == [True, True]

    def make() -> Callable[..., Any]:
        @idempotent(retention=30)
        def bare_only_here_xyz() -> None:
            return None

        return bare_only_here_xyz

    make()
    assert default_registry.get("bare_only_here_xyz") is not None  # the low-level fallback
    assert default_registry.declared("bare_only_here_xyz") is None  # not a declaration
    assert registry.declared("absent") is None
