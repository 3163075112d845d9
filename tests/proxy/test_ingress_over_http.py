"""The message-level rules over HTTP: the same module as on stdio (`ingress`), so what the proxy
cannot parse or check is answered there too (HTTP 400), never relayed."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conformance.kit import free_port

from .helpers import executions, received
from .test_http import call, process, proxy, raw_upstream

pytestmark = pytest.mark.slow


def test_a_body_the_proxy_cannot_parse_or_check_is_answered_not_relayed(tmp_path: Path) -> None:
    log, up, port = tmp_path / "log", free_port(), free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    keyed = json.dumps(call(1, "record", "k-x", label="x")).encode()
    bodies = [
        keyed.replace(b'"x"', b'"x\xff"'),  # invalid UTF-8: the upstream would read "x\ufffd"
        keyed.replace(b'"name"', b'"name":5,"n"'),  # a repeated member name
        json.dumps({**call(1, "record", "k-x", label="x"), "params": ["k-x"]}).encode(),
        json.dumps([[call(1, "record", "k-x", label="x")]]).encode(),  # a nested batch
    ]
    with (
        process(raw_upstream(log, up), up),
        process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port),
    ):
        for body in bodies:
            answer = httpx.post(url, content=body, headers=headers, timeout=20)
            reply = answer.json()
            error = (reply[0] if isinstance(reply, list) else reply)["error"]
            assert error["code"] in (-32700, -32600, -32602), reply
            assert isinstance(error["data"]["type"], str)
    assert executions(log, "x") == executions(log, "x\ufffd") == 0
    assert [m for m in received(log) if m.get("method") == "tools/call"] == []
