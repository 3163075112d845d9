"""Client ids that look like the proxy's own (`idemtools-proxy:N`) never take a keyed call's
answer, and are answered under their own id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import executions, received
from .test_stdio import start

pytestmark = pytest.mark.slow

OURS = "idemtools-proxy:1"


def slow(rid: Any, label: str, key: str | None = None, ms: int = 400) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "slow", "arguments": {"label": label, "ms": ms}}
    if key is not None:
        params["idempotencyKey"] = key
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def text(reply: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(reply["result"]["content"][0]["text"])
    return body


def test_a_client_id_in_the_proxys_namespace_does_not_hijack_a_keyed_call(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        s.send(slow(1, "h", "k-h"))  # upstream under the proxy's first id
        s.send({"jsonrpc": "2.0", "id": OURS, "method": "ping"})  # answered at once upstream
        s.send(slow("idemtools-proxy:2", "u", ms=50))
        assert s.answer(OURS) == {"jsonrpc": "2.0", "id": OURS, "result": {}}
        assert text(s.answer("idemtools-proxy:2"))["label"] == "u"
        keyed = s.answer(1)
        assert text(keyed) == {"label": "h", "executions": 1}
        assert (
            s.request(2, "tools/call", slow(2, "h", "k-h")["params"])["result"] == keyed["result"]
        )
        assert s.close() == 0
    assert executions(log, "h") == 1
    forwarded = [m["id"] for m in received(log) if "id" in m and m.get("method") != "initialize"]
    assert len(forwarded) == len(set(map(json.dumps, forwarded)))  # no id used twice upstream


def test_a_client_cannot_cancel_the_proxys_own_call(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        s.send(slow(1, "c", "k-c"))
        s.send(slow(OURS, "cu", ms=300))  # the client's own: cancelled under its alias
        for target in (OURS, "idemtools-proxy:7", "idemtools-proxy:2"):
            s.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": target},
                }
            )
        assert "result" in s.answer(1) and "result" in s.answer(OURS)
        assert s.close() == 0
    cancels = [
        m["params"]["requestId"] for m in received(log) if "cancelled" in m.get("method", "")
    ]
    aliases = [m["id"] for m in received(log) if m.get("method") == "tools/call"]
    assert len(cancels) == 1 and cancels[0] in aliases  # the client's request, by its alias
    keyed_id = next(
        m["id"]
        for m in received(log)
        if (m.get("params") or {}).get("arguments", {}).get("label") == "c"
    )
    assert keyed_id not in cancels


def test_a_batch_with_an_id_in_the_proxys_namespace_is_answered_under_it(tmp_path: Path) -> None:
    with start(tmp_path) as s:
        s.initialize()
        s.send(
            json.dumps(
                [slow(1, "b", "k-b", ms=200), {"jsonrpc": "2.0", "id": OURS, "method": "ping"}]
            ).encode()
            + b"\n"
        )
        batch = json.loads(s.lines.get(timeout=15))
        assert batch[1] == {"jsonrpc": "2.0", "id": OURS, "result": {}}
        assert text(batch[0]) == {"label": "b", "executions": 1}
        assert s.close() == 0


def test_an_initialize_under_such_an_id_is_still_advertised(tmp_path: Path) -> None:
    with start(tmp_path) as s:
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        reply = s.request(OURS, "initialize", params)
        assert reply["id"] == OURS
        assert reply["result"]["capabilities"]["tools"]["idempotency"] == {}
        assert s.close() == 0
