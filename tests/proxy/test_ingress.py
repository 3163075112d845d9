"""The message-level rules both transports apply to what a client sends (in-process)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from idemtools.proxy.batch import Kind, invalid, kind, needs_split
from idemtools.proxy.ingress import Refused, admit, refusal

KEYED: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "record", "arguments": {"label": "a"}, "idempotencyKey": "k"},
}


def line(message: Any) -> bytes:
    return json.dumps(message).encode()


def refused(data: bytes) -> dict[str, Any]:
    answer = admit(data)
    assert isinstance(answer, Refused), answer
    error: dict[str, Any] = answer.response["error"]
    assert answer.response["jsonrpc"] == "2.0"
    assert isinstance(error["data"]["type"], str)
    return answer.response


def test_invalid_utf8_in_an_argument_is_a_parse_error_with_the_id() -> None:
    data = line(KEYED).replace(b'"a"', b'"a\xff"')
    answer = refused(data)
    assert answer["id"] == 7
    assert answer["error"]["code"] == -32700 and answer["error"]["data"]["type"] == "parse_error"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"\xef\xbb\xbf" + line(KEYED),  # a BOM
        line(KEYED)[:-1],  # cut short
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":NaN}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":1e400}}',
        b"[" * 5000 + b"]" * 5000,  # deeper than the proxy reads
        b"[" * 1025 + b"1" + b"0" * 30 + b"]" * 1025,  # as deep, read by the fallback parser
        line(KEYED) + b"{}",  # two values
    ],
)
def test_what_the_proxy_cannot_parse_is_answered(data: bytes) -> None:
    assert refused(data)["error"]["code"] == -32700


def test_nesting_up_to_the_limit_is_read_by_both_parsers() -> None:
    for tail in (b"1", b"1" + b"0" * 30):  # orjson; the fallback (an integer beyond 64 bits)
        data = b"[" * 1024 + tail + b"]" * 1024
        value = admit(data)
        assert not isinstance(value, Refused)
        for _ in range(1024):
            value = value[0]
        assert value == int(tail)


def test_json_the_fast_parser_refuses_is_still_read() -> None:
    big = {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"n": 2**70, "s": "\ud800"}}
    assert admit(json.dumps(big).encode()) == big


def test_a_repeated_member_name_in_a_message_with_a_key_is_refused() -> None:
    data = line(KEYED).replace(b'"method"', b'"method":"ping","method"')
    answer = refused(data)
    assert answer["error"]["code"] == -32600 and answer["id"] == 7
    spelled = data.replace(b"idempotencyKey", b"idempotency\\u004bey")
    assert refused(spelled)["error"]["code"] == -32600


def with_params(**changes: Any) -> dict[str, Any]:
    return {**KEYED, "params": {**KEYED["params"], **changes}}


@pytest.mark.parametrize(
    ("message", "code", "rid"),
    [
        ({**KEYED, "params": ["record", {"idempotencyKey": "k"}]}, -32602, 7),
        ({**KEYED, "params": "idempotencyKey"}, -32602, 7),
        ({**KEYED, "params": None}, -32602, 7),
        ({k: v for k, v in KEYED.items() if k != "id"}, -32600, None),
        ({**KEYED, "id": None}, -32600, None),
        ({**KEYED, "id": {"a": 1}}, -32600, None),
        ({**KEYED, "id": True}, -32600, None),
        (with_params(name=5), -32602, 7),
        (with_params(arguments=["a"]), -32602, 7),
        (with_params(arguments="a"), -32602, 7),
    ],
)
def test_malformed_keyed_calls_are_refused(message: dict[str, Any], code: int, rid: Any) -> None:
    answer = refused(line(message))
    assert answer["error"]["code"] == code and answer["id"] == rid
    assert refusal(message) == answer


@pytest.mark.parametrize(
    "message",
    [
        KEYED,
        with_params(idempotencyKey=5),  # the engine refuses it: idempotency_key_invalid
        with_params(idempotencyKey=None),  # no key
        with_params(arguments=None),
        with_params(requestState="s"),  # an MRTR continuation: relayed
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}},  # unkeyed
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        [],
        5,
    ],
)
def test_what_the_rules_let_through(message: Any) -> None:
    assert admit(line(message)) == message


def test_a_nested_batch_is_split_and_refused_in_place() -> None:
    batch = [[KEYED], {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    assert needs_split(batch, lambda target: False)
    assert kind(batch[0]) is Kind.INVALID and invalid(batch[0])["error"]["code"] == -32600
    bad = {**KEYED, "params": ["x"]}
    assert needs_split([bad], lambda target: False) and kind(bad) is Kind.INVALID
    assert invalid(bad)["error"]["code"] == -32602 and invalid(bad)["id"] == 7
    assert not needs_split([{"jsonrpc": "2.0", "id": 2, "method": "ping"}, 7], lambda t: False)
