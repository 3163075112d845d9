"""The proxy reads JSON fast and keeps every integer exact."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from idemtools.proxy import jsonread
from idemtools.proxy.ingress import admit

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equal, and every integer still an integer (1 == 1.0 would hide a lost integer)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@given(values)
def test_every_value_reads_back_exactly(value: Any) -> None:
    data = json.dumps(value).encode()
    assert same(jsonread.loads(data), value)
    message = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"v": value}}
    assert same(admit(json.dumps(message).encode()), message)


@given(st.integers(min_value=2**63, max_value=2**200) | st.integers(max_value=-(2**63) - 1))
def test_integers_outside_64_bits_stay_integers(n: int) -> None:
    assert jsonread.needs_exact(str(n).encode())
    assert same(jsonread.loads(f"[{n}]".encode()), [n])
    assert jsonread.loads(f"[{n}]".encode()) != jsonread.loads(f"[{n + 1}]".encode())
