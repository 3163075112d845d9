"""KeyedSession's key rule as properties: an equal retry reuses, anything else not.

"Equal" is idemtools' canonical comparison (docs/contract.md, Equivalence): key order and number
spelling never matter, `None` and `{}` arguments are the same; any other difference is another
operation.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from idemtools.canonical import fingerprint
from idemtools.client.keyed_session import RetryKeys

SAFE = 2**53

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(SAFE - 1), max_value=SAFE - 1)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def respell(value: Any, data: st.DataObject) -> Any:
    """The same JSON value written another way: keys reordered, integers as floats."""
    if isinstance(value, dict):
        items = [(k, respell(v, data)) for k, v in value.items()]
        return dict(data.draw(st.permutations(items)))
    if isinstance(value, list):
        return [respell(v, data) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and data.draw(st.booleans()):
        return float(value)
    return value


@given(args=arguments, data=st.data())
def test_an_equal_retry_after_an_unknown_outcome_reuses_the_key(
    args: dict[str, Any], data: st.DataObject
) -> None:
    keys = RetryKeys()
    first = keys.begin("charge", args)
    keys.unknown(first)
    again = respell(args, data)
    assert fingerprint("charge", again) == fingerprint("charge", args)
    retry = keys.begin("charge", again or (None if data.draw(st.booleans()) else {}))
    assert retry.key == first.key
    # One retry takes the key: a concurrent equal call meanwhile is its own operation.
    assert keys.begin("charge", args).key != first.key


@given(a=arguments, b=arguments)
def test_a_different_call_gets_a_new_key(a: dict[str, Any], b: dict[str, Any]) -> None:
    keys = RetryKeys()
    first = keys.begin("charge", a)
    keys.unknown(first)
    if fingerprint("charge", a) != fingerprint("charge", b):
        assert keys.begin("charge", b).key != first.key
    assert keys.begin("refund", a).key != first.key  # another tool: never the same operation
    assert len(keys) in (0, 1)


def test_a_definite_answer_forgets_the_key() -> None:
    keys = RetryKeys()
    first = keys.begin("charge", {"amount": 1})  # never filed as unknown: definite
    assert keys.begin("charge", {"amount": 1}).key != first.key


def test_arguments_that_cannot_be_compared_are_always_new() -> None:
    keys = RetryKeys()
    first = keys.begin("charge", {"amount": float("nan")})
    keys.unknown(first)
    assert keys.begin("charge", {"amount": float("nan")}).key != first.key
    assert len(keys) == 0


def test_the_memory_is_bounded() -> None:
    keys = RetryKeys()
    for n in range(1100):
        keys.unknown(keys.begin("charge", {"n": n}))
    assert len(keys) == 1024
    assert keys.begin("charge", {"n": 0}).reused is False  # the oldest went first
    assert keys.begin("charge", {"n": 1099}).reused is True


def test_published_retention_caps_the_window() -> None:
    class Tool:
        def __init__(self, name: str, meta: Any) -> None:
            self.name, self.meta = name, meta

    keys = RetryKeys(window=600)
    keys.note_tools(
        [
            Tool("short", {"io.github.idemtools/idempotency": {"retentionSeconds": 5}}),
            Tool("plain", None),
        ]
    )
    assert keys.limit("short") == 5 and keys.limit("plain") == 600
