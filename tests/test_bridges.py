"""idemtools.bridges: the key sources outside SEP-3182, transport-free.

Over a real server on every adapter: tests/e2e/test_bridges.py (mcp 2.x and 1.x, MCPServer /
FastMCP-in-mcp and the low-level Server) and tests/fastmcp/test_bridges.py (FastMCP 4).
"""

from __future__ import annotations

import hashlib
import string
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemtools import Engine, Outcome, Policy, Registry, bridges, idempotent, shared
from idemtools.engine import ToolCall
from idemtools.stores import MemoryStore

KEY = "idempotency_key"

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def policy(**options: Any) -> Policy:
    return Policy.of(scope=shared, **options)


# -- resolve --------------------------------------------------------------------------------------


def test_without_a_bridge_the_call_is_as_sent() -> None:
    args = {"a": 1, KEY: "x"}
    bridge = bridges.resolve(policy(), "t", None, args)
    assert (bridge.key, bridge.source, bridge.arguments, bridge.changed) == (
        None,
        "sep",
        args,
        False,
    )
    bridge = bridges.resolve(None, "t", "K", args)
    assert (bridge.key, bridge.source, bridge.arguments) == ("K", "sep", args)


@given(value=st.text(min_size=1), rest=st.dictionaries(st.text(), json_values, max_size=4))
def test_key_argument_is_the_key_and_never_in_the_arguments(
    value: str, rest: dict[str, Any]
) -> None:
    rest.pop(KEY, None)
    bridge = bridges.resolve(policy(key_argument=KEY), "t", None, {**rest, KEY: value})
    assert (bridge.key, bridge.source) == (value, "argument")
    assert bridge.arguments == rest and bridge.passed == rest and bridge.changed


@given(sep=st.text(min_size=1), value=st.text(min_size=1))
def test_the_sep_field_wins_and_the_argument_is_still_left_out(sep: str, value: str) -> None:
    bridge = bridges.resolve(policy(key_argument=KEY), "t", sep, {"a": 1, KEY: value})
    assert (bridge.key, bridge.source, bridge.arguments) == (sep, "sep", {"a": 1})


def test_a_missing_or_null_argument_leaves_the_call_unkeyed() -> None:
    p = policy(key_argument=KEY)
    for args in ({"a": 1}, {"a": 1, KEY: None}, None):
        bridge = bridges.resolve(p, "t", None, args)
        assert bridge.key is None


def test_a_function_that_asks_gets_the_argument() -> None:
    @idempotent(key_argument=KEY, registry=Registry())
    def tool(a: int, idempotency_key: str | None = None) -> None: ...

    @idempotent(key_argument=KEY, registry=Registry())
    def other(a: int) -> None: ...

    asks, plain = tool.__idemtools_policy__, other.__idemtools_policy__  # type: ignore[attr-defined]
    assert asks.passes_key_argument and not plain.passes_key_argument
    bridge = bridges.resolve(asks, "tool", None, {"a": 1, KEY: "k"})
    assert bridge.passed == {"a": 1, KEY: "k"} and not bridge.changed
    assert bridge.arguments == {"a": 1}  # the fingerprint still leaves it out


@given(a=st.integers(min_value=-(2**53), max_value=2**53), other=st.text())
def test_key_from_compares_canonically(a: int, other: str) -> None:
    p = policy(key_from=("n",))
    first = bridges.resolve(p, "t", None, {"n": a, "x": other})
    second = bridges.resolve(p, "t", None, {"x": "different", "n": float(a)})
    assert first.source == second.source == "derived"
    assert first.key == second.key  # other arguments are for the fingerprint to compare
    assert first.key != bridges.resolve(p, "u", None, {"n": a}).key  # another tool
    assert first.key != bridges.resolve(p, "t", None, {"n": a + 1}).key


def test_key_from_with_a_named_argument_missing_is_unkeyed_and_the_sep_field_wins() -> None:
    p = policy(key_from=("order_id", "amount"))
    assert bridges.resolve(p, "t", None, {"order_id": "A"}).key is None
    assert bridges.resolve(p, "t", None, None).key is None
    sent = bridges.resolve(p, "t", "K", {"order_id": "A", "amount": 1})
    assert (sent.key, sent.source) == ("K", "sep")


# -- the derived namespace ------------------------------------------------------------------------


@given(
    client_key=st.text(min_size=1, max_size=300),
    scope_value=st.text(),
    values=st.dictionaries(st.sampled_from("abc"), json_values, min_size=1),
)
def test_a_derived_record_is_never_a_client_keys_record(
    client_key: str, scope_value: str, values: dict[str, Any]
) -> None:
    """Whatever a client sends as `idempotencyKey`, in whatever scope, its (scope, key) pair is
    never the (scope, key) of a derived record: the derived scope is no scope hash."""
    names = tuple(sorted(values))
    derived = bridges.derived_key("t", names, values)
    scope = hashlib.sha256(scope_value.encode("utf-8", "surrogatepass")).hexdigest()
    for any_scope in (scope, bridges.derived_scope(scope)[: len(scope)]):
        assert (bridges.derived_scope(scope), derived) != (any_scope, client_key)
    assert len(bridges.derived_scope(scope)) != len(scope)


async def test_in_the_engine_a_sent_derived_text_meets_nothing() -> None:
    engine = Engine(MemoryStore(), registry=Registry(), default_policy=policy())
    runs: list[int] = []

    async def run() -> Outcome:
        runs.append(1)
        return Outcome(result={"content": [], "isError": False, "n": len(runs)})

    text = bridges.derived_key("t", ("a",), {"a": 1})
    derived = await engine.handle(ToolCall("t", {"a": 1}, text, source="derived"), run)
    sent = await engine.handle(ToolCall("t", {"a": 1}, text), run)
    replay = await engine.handle(ToolCall("t", {"a": 1.0}, text, source="derived"), run)
    assert derived.result is not None and sent.result is not None
    assert (derived.result["n"], sent.result["n"]) == (1, 2)
    assert replay.replayed and replay.result == derived.result


def test_an_uncomparable_value_is_refused_by_the_fingerprint_not_merged() -> None:
    text = bridges.derived_key("t", ("a",), {"a": float("nan")})
    assert text == "derived:uncomparable"


# -- declarations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"key_from": ()}, ValueError, "names no argument"),
        ({"key_from": "order_id"}, TypeError, "tuple of argument names"),
        ({"key_from": ("a", "a")}, ValueError, "twice"),
        ({"key_from": ("a", "")}, TypeError, "non-empty"),
        ({"key_argument": ""}, TypeError, "non-empty"),
        ({"key_header": True}, TypeError, "give key_argument"),
        ({"key_argument": "k", "key_from": ("a",)}, TypeError, "two different bridges"),
        ({"key_argument": "bad key", "key_header": True}, ValueError, "HTTP header"),
    ],
)
def test_a_declaration_that_cannot_mean_one_thing_is_refused(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        idempotent(registry=Registry(), **options)


def test_key_from_names_must_be_parameters() -> None:
    with pytest.raises(TypeError, match="no parameter 'order'"):

        @idempotent(key_from=("order",), registry=Registry())
        def pay(order_id: str) -> None: ...

    @idempotent(key_from=("anything",), registry=Registry())
    def loose(**arguments: Any) -> None: ...  # cannot tell: accepted


def test_a_bridged_declaration_notes_its_name() -> None:
    registry = Registry()

    @idempotent(name="bridged_note_test", key_argument=KEY, registry=registry)
    def f() -> None: ...

    registry.register("bridged_register_test", policy(key_from=("a",)))
    registry.register("plain_register_test", policy())
    assert {"bridged_note_test", "bridged_register_test"} <= bridges.BRIDGED
    assert "plain_register_test" not in bridges.BRIDGED


# -- schema ---------------------------------------------------------------------------------------


def test_the_schema_gains_an_optional_string_argument() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    out: Any = bridges.with_key_argument(schema, policy(key_argument=KEY))
    assert out["properties"][KEY]["type"] == "string"
    assert out["required"] == ["a"] and "x-mcp-header" not in out["properties"][KEY]
    assert schema["properties"] == {"a": {"type": "integer"}}  # untouched
    header: Any = bridges.with_key_argument(schema, policy(key_argument=KEY, key_header=True))
    assert header["properties"][KEY]["x-mcp-header"] == "Idempotency-Key"
    assert bridges.with_key_argument(schema, policy()) is schema
    assert bridges.with_key_argument(None, policy(key_argument=KEY)) is None


def test_the_header_token_is_one_an_sdk_accepts() -> None:
    mcp_inbound = pytest.importorskip("mcp.shared.inbound")
    for name in ("idempotency_key", "key", "op_id_2"):
        token = bridges.header_token(name)
        assert set(token) <= set(string.ascii_letters + string.digits + "-")
        schema = bridges.with_key_argument(
            {"type": "object", "properties": {}}, policy(key_argument=name, key_header=True)
        )
        assert mcp_inbound.find_invalid_x_mcp_header(schema) is None


def test_key_sources() -> None:
    assert bridges.key_sources(policy()) == ["sep"]
    assert bridges.key_sources(policy(key_argument=KEY)) == ["sep", "argument"]
    assert bridges.key_sources(policy(key_from=("a",))) == ["sep", "derived"]


def test_a_server_default_policy_takes_no_bridge() -> None:
    from mcp.server.lowlevel import Server

    from idemtools import InstallError, install

    with pytest.raises(InstallError, match="declared per tool"):
        install(Server("s"), default_policy=policy(key_argument=KEY))
