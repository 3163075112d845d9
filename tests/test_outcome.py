"""`Outcome`: the SDK-neutral JSON form of a tools/call answer, and its stored bytes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools import Outcome
from tests.budget import examples

pytestmark = pytest.mark.sdk_free

texts = st.text(st.characters(codec="utf-8"))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(st.characters(codec="utf-8")),
)
json_values = st.recursive(
    json_scalars,
    lambda ch: st.one_of(
        st.lists(ch, max_size=4),
        st.dictionaries(st.text(st.characters(codec="utf-8")), ch, max_size=4),
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(texts, json_values, max_size=5)


@settings(max_examples=examples(300), deadline=None)
@given(json_objects)
def test_result_round_trip(result: dict[str, Any]) -> None:
    outcome = Outcome(result=result)
    back = Outcome.from_bytes(outcome.to_bytes())
    assert back == outcome
    assert back.result == result
    assert back.error is None
    assert back.replayed and not outcome.replayed
    assert back.final
    assert back.to_bytes() == outcome.to_bytes()


@settings(max_examples=examples(300), deadline=None)
@given(st.integers(-(2**31), 2**31), texts, json_values)
def test_error_round_trip(code: int, message: str, data: Any) -> None:
    outcome = Outcome.of_error(code, message, data)
    assert outcome.is_error
    back = Outcome.from_bytes(outcome.to_bytes())
    assert back == outcome
    assert back.error is not None
    assert back.error["code"] == code and back.error["message"] == message
    if data is None:
        assert "data" not in back.error
    else:
        assert back.error["data"] == data
    assert back.replayed


def test_stored_form_is_plain_json_not_pickle() -> None:
    stored = Outcome(result={"content": [], "isError": False}).to_bytes()
    assert json.loads(stored) == {"v": 1, "result": {"content": [], "isError": False}}
    assert json.loads(Outcome.of_error(-1, "m", {"a": 1}).to_bytes()) == {
        "v": 1,
        "error": {"code": -1, "message": "m", "data": {"a": 1}},
    }


@pytest.mark.parametrize("data", [0, "", {}, [], False])
def test_falsy_error_data_is_kept(data: Any) -> None:
    outcome = Outcome.of_error(-32000, "m", data)
    assert outcome.error == {"code": -32000, "message": "m", "data": data}


def test_exactly_one_of_result_or_error() -> None:
    with pytest.raises(ValueError):
        Outcome()
    with pytest.raises(ValueError):
        Outcome(result={}, error={"code": 1, "message": "m"})
    assert Outcome(result={}).is_error is False
    assert Outcome(error={"code": 1, "message": "m"}).is_error is True


def test_equality_ignores_replayed_but_not_final() -> None:
    assert Outcome(result={"a": 1}) == Outcome(result={"a": 1}, replayed=True)
    assert Outcome(result={"a": 1}) != Outcome(result={"a": 1}, final=False)
    assert Outcome(result={"a": 1}) != Outcome(result={"a": 2})


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        b"not json",
        b"\xff\xfe\x00",
        b"null",
        b"[]",
        b"1",
        b'"text"',
        b"{}",
        b'{"result": {}}',  # no version
        b'{"v": 3, "result": {}}',  # unknown version
        b'{"v": "1", "result": {}}',
        b'{"v": 1}',  # neither
        b'{"v": 1, "result": null, "error": null}',
        b'{"v": 1, "result": {}, "error": {"code": 1, "message": "m"}}',  # both
        b'{"v": 1, "result": []}',
        b'{"v": 1, "result": "ok"}',
        b'{"v": 1, "error": []}',
        b'{"v": 1, "error": {"message": "m"}}',
        b'{"v": 1, "error": {"code": 1}}',
        b'{"v": 1, "error": {"code": "1", "message": "m"}}',
        b'{"v": 1, "error": {"code": 1.5, "message": "m"}}',
        b'{"v": 1, "error": {"code": 1, "message": 5}}',
        b'{"v": 1, "result": {}',  # truncated
    ],
)
def test_corrupt_bytes_raise_value_error(stored: bytes) -> None:
    with pytest.raises(ValueError):
        Outcome.from_bytes(stored)


@settings(max_examples=examples(500), deadline=None)
@given(st.one_of(st.binary(max_size=64), json_values.map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bytes_decode_or_raise_value_error(stored: bytes) -> None:
    try:
        outcome = Outcome.from_bytes(stored)
    except ValueError:
        return
    assert (outcome.result is None) != (outcome.error is None)


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30, "\ud800", {"\udc00": 1}], ids=str)
def test_any_json_value_round_trips(value: Any) -> None:
    outcome = Outcome(result={"structuredContent": {"v": value}})
    assert Outcome.from_bytes(outcome.to_bytes()) == outcome
