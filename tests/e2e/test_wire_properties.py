"""Hypothesis over the wire: respellings of the same arguments replay, any changed value conflicts.

Each example sends real JSON text through the SDK's in-memory server loop, so the spellings
(key order, `1` vs `1.0`, escapes) are what the server parses, not Python values.
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.budget import examples

from .harness import error_type, make_app, memory_wire

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.text(max_size=12),
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)
arguments = st.dictionaries(st.text(max_size=6), json_values, max_size=5)


def respell(value: Any, rng: random.Random) -> Any:
    """The same JSON value, spelled differently: shuffled keys, integral numbers as floats."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: respell(v, rng) for k, v in items}
    if isinstance(value, list):
        return [respell(v, rng) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= 2**53:
        return float(value) if rng.random() < 0.5 else value
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53:
        return int(value) if rng.random() < 0.5 else value
    return value


def changed(value: Any, rng: random.Random) -> Any:
    """A different JSON value: one leaf altered, or a key added."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        return {**value, key: changed(value[key], rng)}
    if isinstance(value, list) and value:
        i = rng.randrange(len(value))
        return [*value[:i], changed(value[i], rng), *value[i + 1 :]]
    if isinstance(value, dict):
        return {**value, "\u00e9x": 1}
    if isinstance(value, bool) or value is None:
        return [value]
    if isinstance(value, (int, float)):
        return value + 1 if abs(value) < 2**52 else str(value)
    return value + "\u0301" if value else "x"  # combining accent: no normalisation allowed


async def _send_twice(first: Any, second: Any) -> tuple[dict[str, Any], dict[str, Any], int]:
    app = make_app()
    async with memory_wire(app) as wire:
        # Raw JSON text for the second send, escapes spelled out (ensure_ascii), then parsed by
        # the server exactly as any client's bytes would be.
        a = await wire.call({"name": "echo", "arguments": {"value": first}, "idempotencyKey": "k"})
        text = json.dumps({"value": second}, ensure_ascii=True)
        b = await wire.call({"name": "echo", "arguments": json.loads(text), "idempotencyKey": "k"})
    return a, b, app.count("echo")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=arguments, seed=st.integers(0, 2**32 - 1))
def test_respelled_arguments_replay(args: dict[str, Any], seed: int) -> None:
    again = respell(args, random.Random(seed))
    first, second, runs = anyio.run(_send_twice, args, again)
    assert "result" in first
    assert second.get("result") == first["result"], second
    assert runs == 1


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=arguments, seed=st.integers(0, 2**32 - 1))
def test_any_changed_value_conflicts(args: dict[str, Any], seed: int) -> None:
    other = changed(args, random.Random(seed))
    first, second, runs = anyio.run(_send_twice, args, other)
    assert "result" in first
    assert error_type(second) == "idempotency_key_conflict", second
    assert runs == 1
