"""Fail closed on stdio: what the proxy cannot parse or refuses is answered, never relayed.

The upstream (tests/proxy/upstream.py) reads as the Python SDK does: invalid UTF-8 decoded with
replacement, a CR ends a line. Relayed, a keyed call the proxy could not read would run there
on every retry.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.budget import examples

from .helpers import Session, executions, received
from .test_stdio import start

pytestmark = pytest.mark.slow


def keyed(rid: Any, label: str, key: str = "k") -> dict[str, Any]:
    params = {"name": "record", "arguments": {"label": label}, "idempotencyKey": key}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def raw(message: Any) -> bytes:
    return json.dumps(message).encode() + b"\n"


def sync(s: Session, rid: str) -> None:
    """Every line sent before has been taken by the proxy and the upstream."""
    s.send({"jsonrpc": "2.0", "id": rid, "method": "ping"})
    s.answer(rid)


def tool_calls(log: Path) -> list[Any]:
    return [m for m in received(log) if isinstance(m, dict) and m.get("method") == "tools/call"]


def test_a_keyed_call_with_invalid_utf8_is_answered_and_never_relayed(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        for rid in (1, 2, 3):
            s.send(raw(keyed(rid, "a")).replace(b'"a"', b'"a\xff"'))
            answer = s.answer(rid)
            assert answer["error"]["code"] == -32700, answer
            assert answer["error"]["data"]["type"] == "parse_error"
        s.send(b"\xff not json at all\n")
        assert s.answer(None)["error"]["code"] == -32700  # no id to recover
        sync(s, "sync")
        assert s.close() == 0
    assert executions(log, "a\ufffd") == 0 and tool_calls(log) == []
    assert not [m for m in received(log) if "unparsed" in m]


MALFORMED: list[Any] = [
    {**keyed(1, "m"), "params": ["record", {"idempotencyKey": "k"}]},
    {**keyed(2, "m"), "params": "idempotencyKey"},
    {k: v for k, v in keyed(None, "m").items() if k != "id"},
    {**keyed(3, "m"), "params": {**keyed(3, "m")["params"], "name": 5}},
    {**keyed(4, "m"), "params": {**keyed(4, "m")["params"], "arguments": ["m"]}},
    {**keyed(5, "m"), "params": {**keyed(5, "m")["params"], "idempotencyKey": 5}},
    {**keyed(6, "m"), "params": {**keyed(6, "m")["params"], "idempotencyKey": ""}},
]


def test_malformed_keyed_calls_and_nested_batches_are_refused(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        for message in MALFORMED:
            s.send(raw(message))
            answer = s.answer(message.get("id"))
            assert "error" in answer and isinstance(answer["error"]["data"]["type"], str)
        s.send(raw([[keyed(7, "m")], {"jsonrpc": "2.0", "id": 8, "method": "ping"}]))
        batch = json.loads(s.lines.get(timeout=15))
        assert batch[0]["error"]["code"] == -32600 and batch[1] == {
            "jsonrpc": "2.0",
            "id": 8,
            "result": {},
        }
        repeated = raw(keyed(9, "m")).replace(b'"method"', b'"method":"ping","method"', 1)
        s.send(repeated)
        assert s.answer(9)["error"]["code"] == -32600
        sync(s, "sync")
        assert s.close() == 0
    assert executions(log, "m") == 0 and tool_calls(log) == []


def test_a_cr_inside_a_line_cannot_smuggle_a_keyed_call(tmp_path: Path) -> None:
    # A CR is JSON whitespace to the proxy and a line end to the upstream's reader.
    log = tmp_path / "log"
    inner = json.dumps(keyed(1, "cr")).encode()
    line = b'{"jsonrpc":"2.0","method":"notifications/message","params":\r' + inner + b"\r}\n"
    with start(tmp_path) as s:
        s.initialize()
        s.send(line)
        sync(s, "sync")
        assert s.close() == 0
    assert executions(log, "cr") == 0
    notes = [m for m in received(log) if m.get("method") == "notifications/message"]
    assert notes == [json.loads(line)]


# -- any bytes, any JSON shape ---------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
IDS = st.one_of(
    st.integers(), st.text(max_size=6), st.none(), st.booleans(), st.just("idemtools-proxy:1"), JSON
)
NAMES = st.sampled_from(["record", "nope"]) | JSON
PARAMS = st.one_of(
    st.fixed_dictionaries(
        {"name": NAMES, "idempotencyKey": JSON | st.text(min_size=1, max_size=8)},
        optional={
            "arguments": st.fixed_dictionaries({"label": st.just("prop")}) | JSON,
            "requestState": st.none() | JSON,
            "_meta": JSON,
        },
    ),
    JSON,
)
REQUEST = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": st.sampled_from(["tools/call", "ping"]) | st.text()},
    optional={"id": IDS, "params": PARAMS},
)
MESSAGE = st.one_of(REQUEST, st.lists(REQUEST | JSON | st.lists(REQUEST, max_size=2), max_size=3))
NOISE = st.sampled_from(
    [b"\xff", b"\xc3", b"\r", b"\x00", b"\\u", b"\\", b'"', b"{", b"\xef\xbb\xbf"]
)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """A serialized message, maybe with bytes put in or taken out, or any bytes at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64)).replace(b"\n", b" ")
    data = json.dumps(draw(MESSAGE), ensure_ascii=draw(st.booleans())).encode()
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(data)))
        if draw(st.booleans()):
            data = data[:at] + draw(NOISE | st.binary(min_size=1, max_size=2)) + data[at:]
        else:
            data = data[:at] + data[at + 1 :]
    return data.replace(b"\n", b" ")


def unchecked(message: Any) -> bool:
    """A keyed call the engine never saw: with the key stripped (the default), the engine's
    calls reach the upstream without one; an MRTR continuation keeps it, by design."""
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return False
    params = message.get("params")
    return (
        isinstance(params, dict)
        and params.get("idempotencyKey") is not None
        and params.get("requestState") is None
        and params.get("inputResponses") is None
    )


def test_no_message_carrying_a_keyed_call_reaches_the_upstream_unchecked(tmp_path: Path) -> None:
    log = tmp_path / "log"
    syncs = itertools.count()
    with start(tmp_path) as s:
        s.initialize()

        @settings(
            max_examples=examples(60),
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(lines())
        def check(data: bytes) -> None:
            seen = len(received(log))
            s.send(data + b"\n")
            sync(s, f"sync-{next(syncs)}")
            got = received(log)[seen:]
            flat = [e for m in got for e in (m if isinstance(m, list) else [m])]
            assert not [m for m in flat if unchecked(m)], (data, got)
            assert s.proc.poll() is None, s.err()

        check()
        assert s.close() == 0


def test_lone_surrogates_and_big_integers_are_relayed_as_the_same_value(tmp_path: Path) -> None:
    # Re-serialized (a CR inside; an id the proxy aliases): still one valid UTF-8 line.
    log = tmp_path / "log"
    message = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"s": "\ud800", "n": 2**70},
    }
    with start(tmp_path) as s:
        s.initialize()
        s.send(json.dumps(message).replace(", ", ",\r ").encode() + b"\n")
        s.send({"jsonrpc": "2.0", "id": "idemtools-proxy:\ud800", "method": "ping"})
        assert s.answer("idemtools-proxy:\ud800")["result"] == {}
        assert s.close() == 0
    assert message in received(log)
