"""The proxy writes back every value it reads: big integers and lone surrogates included."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from idemtools.proxy import jsonread, jsonwrite

from .test_jsonread import same

# Any text, often with a lone surrogate (which JSON can spell only as an escape).
texts = st.text(st.characters() | st.sampled_from("\ud800\udbff\udc00\udfff"), max_size=8)

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**64, max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)


@given(values)
def test_every_value_written_reads_back_exactly(value: Any) -> None:
    assert same(jsonread.loads(jsonwrite.dumps(value)), value)


def test_a_lone_surrogate_is_written_as_its_escape() -> None:
    assert jsonwrite.dumps({"t": "\ud800é"}) == b'{"t":"\\ud800\\u00e9"}'
    expected = '{"t":"é","n":1180591620717411303424}'.encode()
    assert jsonwrite.dumps({"t": "é", "n": 2**70}) == expected
