"""Pass-through fidelity: a session of unkeyed traffic gives the same bytes with and without the
proxy, apart from the capability in the `initialize` result.

The session has tools/list, resources/list, prompts/get, ping, an unknown method, a progress
notification, a sampling request from the server (answered by the client) and a cancellation;
every line the client receives is compared byte for byte, and every line the upstream receives
too (the upstream logs them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import Session, proxy_argv, received, upstream_argv

pytestmark = pytest.mark.slow


def session(s: Session) -> list[bytes]:
    s.initialize()
    for rid, method, params in [
        (1, "tools/list", {}),
        (2, "resources/list", {}),
        ("three", "prompts/get", {"name": "p", "arguments": {"x": "caf\u00e9"}}),
        (4, "ping", {}),
        (5, "no/such/method", {}),
    ]:
        s.request(rid, method, params)
    slow = {"name": "slow", "arguments": {"label": "p", "ms": 50}, "_meta": {"progressToken": 7}}
    s.request(6, "tools/call", slow)
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 8,
            "method": "tools/call",
            "params": {"name": "sample", "arguments": {"label": "q"}},
        }
    )
    asked = s.recv()
    assert asked["method"] == "sampling/createMessage"
    s.send({"jsonrpc": "2.0", "id": asked["id"], "result": {"model": "m", "role": "assistant"}})
    s.answer(8)
    s.send(
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {"name": "slow", "arguments": {"label": "c", "ms": 100}},
        }
    )
    s.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": 9, "reason": "user"},
        }
    )
    s.answer(9)
    s.request(10, "tools/call", {"name": "record", "arguments": {"label": "big", "n": 2**70}})
    assert s.close() == 0
    return s.raw


def without_capability(line: bytes) -> Any:
    message = json.loads(line)
    message["result"]["capabilities"]["tools"].pop("idempotency")
    return message


def test_unkeyed_session_is_byte_equal_with_and_without_the_proxy(tmp_path: Path) -> None:
    direct_log, proxied_log = tmp_path / "direct", tmp_path / "proxied"
    with Session(upstream_argv(direct_log)) as s:
        direct = session(s)
    with Session(proxy_argv(upstream=upstream_argv(proxied_log))) as s:
        proxied = session(s)
    assert len(direct) == len(proxied) > 10
    # initialize: the same JSON value, plus the capability (the line is re-serialized).
    assert json.loads(proxied[0])["result"]["capabilities"]["tools"]["idempotency"] == {}
    assert without_capability(proxied[0]) == json.loads(direct[0])
    assert proxied[1:] == direct[1:]  # every other line, byte for byte, ids included
    # What the upstream received: the same messages, in the same order, ids preserved.
    assert received(proxied_log) == received(direct_log)
