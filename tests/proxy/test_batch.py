"""JSON-RPC batches (MCP 2025-03-26) holding keyed calls, on stdio and HTTP: split, so that a
keyed call inside a batch is decided by the engine and a retried batch never runs it twice.

Real processes throughout: the proxy, and the raw upstream (tests/proxy/upstream.py), which
takes batches as a 2025-03-26 server would (and logs `{"batch": N}` for each): relayed unchanged,
a retried batch would run its keyed call twice there. Every entry it gets from the proxy
arrived on its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.kit import free_port

from .helpers import Session, executions, received
from .test_http import process, proxy, raw_upstream
from .test_stdio import start

pytestmark = pytest.mark.slow

IN_PROGRESS = "idempotency_key_in_progress"


def tool(rid: Any, name: str, key: str | None = None, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if key is not None:
        params["idempotencyKey"] = key
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def notice(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


def text(reply: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(reply["result"]["content"][0]["text"])
    return body


def batch_line(s: Session, entries: list[Any]) -> list[dict[str, Any]]:
    s.send(json.dumps(entries).encode() + b"\n")
    line = s.lines.get(timeout=15)
    answer = json.loads(line)
    assert isinstance(answer, list), answer
    return answer


def mixed(first: int) -> list[Any]:
    """A keyed call, an unkeyed call, a notification, a ping and a non-object."""
    return [
        tool(first, "record", "k-b", label="b"),
        tool(first + 1, "record", label="bu"),
        notice("notifications/roots/list_changed"),
        {"jsonrpc": "2.0", "id": f"ping-{first}", "method": "ping"},
        7,
    ]


def test_a_retried_stdio_batch_never_runs_its_keyed_call_twice(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        first = batch_line(s, mixed(1))
        # One response per request, in the batch's order, ids preserved; none for the
        # notification; JSON-RPC's Invalid Request (id null) for the non-object.
        assert [m["id"] for m in first] == [1, 2, "ping-1", None]
        assert text(first[0])["executions"] == 1 and text(first[1])["executions"] == 1
        assert first[2]["result"] == {} and first[3]["error"]["code"] == -32600
        again = batch_line(s, mixed(11))
        assert [m["id"] for m in again] == [11, 12, "ping-11", None]
        assert again[0]["result"] == first[0]["result"]  # the replay
        assert text(again[1])["executions"] == 2  # unkeyed: it runs again, as it should
        # Twice the same key in one batch: one execution; the other entry is told so.
        twice = batch_line(
            s, [tool(21, "record", "k-2", label="t"), tool(22, "record", "k-2", label="t")]
        )
        assert [m["id"] for m in twice] == [21, 22]
        assert text(twice[0])["executions"] == 1
        second = twice[1]
        assert second.get("result") == twice[0]["result"] or (
            second["error"]["data"]["type"] == IN_PROGRESS
        ), second
        # And the keyed call on its own afterwards: the same record.
        assert s.call(23, "record", "k-b", label="b")["result"] == first[0]["result"]
        assert s.close() == 0
    assert executions(log, "b") == 1 and executions(log, "t") == 1
    assert executions(log, "bu") == 2
    got = received(log)
    assert not [m for m in got if "batch" in m]  # every entry forwarded on its own
    assert all("idempotencyKey" not in (m.get("params") or {}) for m in got)
    assert sum(m.get("method") == "notifications/roots/list_changed" for m in got) == 2


def test_a_batch_cancelling_a_keyed_call_in_flight_is_not_answered(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        s.send(tool(1, "slow", "k-bc", label="c", ms=600))
        deadline = time.monotonic() + 10
        while executions(log, "c") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        entries = [notice("notifications/cancelled", requestId=1), notice("notifications/x")]
        s.send(json.dumps(entries).encode() + b"\n")
        s.send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
        # An all-notification batch gets no response: the next lines are the two answers.
        got = [s.recv(), s.recv()]
        assert sorted(json.dumps(m["id"]) for m in got) == ["1", "2"], got
        assert "result" in next(m for m in got if m["id"] == 1)
        s.close()
    methods = [m.get("method") for m in received(log)]
    assert "notifications/cancelled" not in methods and "notifications/x" in methods


def test_upstream_death_inside_a_batch_is_recorded_and_never_runs_twice(tmp_path: Path) -> None:
    log = tmp_path / "log"
    entries = [tool(1, "slow", label="bw", ms=3000), tool(2, "die", "k-bd", label="bd")]
    with start(tmp_path) as s:
        s.initialize()
        lost = batch_line(s, entries)
        assert [m["id"] for m in lost] == [1, 2]
        assert lost[0]["error"]["data"]["type"] == "upstream_unavailable"  # never answered
        assert "notProcessed" not in lost[0]["error"]["data"]  # it was sent: it may have run
        assert lost[1]["error"]["data"] == {
            "type": "idempotency_outcome_unknown",
            "idempotencyKey": "k-bd",
        }
        assert s.close() == 3
    with start(tmp_path) as s:  # a new proxy and upstream, the same store
        s.initialize()
        replay = batch_line(s, [tool(3, "die", "k-bd", label="bd")])
        assert replay[0]["error"] == lost[1]["error"] and replay[0]["id"] == 3
        s.close()
    assert executions(log, "bd") == 1


def post_batch(url: str, entries: list[Any], **extra: Any) -> httpx.Response:
    headers = {"authorization": "Bearer t", "accept": "application/json, text/event-stream"}
    return httpx.post(url, content=json.dumps(entries), headers=headers, timeout=20, **extra)


def test_a_retried_http_batch_never_runs_its_keyed_call_twice(tmp_path: Path) -> None:
    log, up, port = tmp_path / "log", free_port(), free_port()
    with (
        process(raw_upstream(log, up), up),
        process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port),
    ):
        url = f"http://127.0.0.1:{port}/mcp"
        first = post_batch(url, mixed(1))
        assert first.status_code == 200 and first.headers["content-type"] == "application/json"
        answers = first.json()
        assert [m["id"] for m in answers] == [1, 2, "ping-1", None]
        assert text(answers[0])["executions"] == 1 and answers[3]["error"]["code"] == -32600
        again = post_batch(url, mixed(11)).json()
        assert [m["id"] for m in again] == [11, 12, "ping-11", None]
        assert again[0]["result"] == answers[0]["result"] and text(again[1])["executions"] == 2
        twice = [tool(21, "record", "k-2", label="t"), tool(22, "record", "k-2", label="t")]
        both = post_batch(url, twice).json()
        assert [m["id"] for m in both] == [21, 22]
        assert all(
            m.get("result") == both[0]["result"] or m["error"]["data"]["type"] == IN_PROGRESS
            for m in both
        ), both
        # Events before the answers (a progress notification): an SSE stream ending in the array.
        slow = tool(31, "slow", "k-sse", label="s", ms=10)
        slow["params"]["_meta"] = {"progressToken": "p"}
        streamed = post_batch(url, [slow, tool(32, "record", label="su")])
        assert streamed.headers["content-type"].startswith("text/event-stream")
        data = [json.loads(x[5:]) for x in streamed.text.splitlines() if x.startswith("data:")]
        assert data[0]["method"] == "notifications/progress"
        assert [m["id"] for m in data[-1]] == [31, 32]
        replayed = post_batch(url, [{**slow, "id": 33}]).json()  # no events now: JSON
        assert replayed[0]["result"] == data[-1][0]["result"]
        # Only refusals (HTTP 401 without JSON-RPC, nothing ran): relayed as they came.
        refused = post_batch(url, [tool(41, "record", "k-401", label="r", status=401)])
        assert refused.status_code == 401 and refused.text == "refused"
    assert executions(log, "b") == 1 and executions(log, "t") == 1
    assert executions(log, "s") == 1 and executions(log, "bu") == 2
    forwarded = received(log)
    assert not [m for m in forwarded if "batch" in m]
    assert all("idempotencyKey" not in (m.get("params") or {}) for m in forwarded)
    assert sum(m.get("method") == "notifications/roots/list_changed" for m in forwarded) == 2


def test_a_batch_without_a_keyed_call_is_relayed_as_it_came(tmp_path: Path) -> None:
    log, up, port = tmp_path / "log", free_port(), free_port()
    entries = [tool(1, "record", label="p1"), {"jsonrpc": "2.0", "id": 2, "method": "ping"}]
    with start(tmp_path) as s:
        s.initialize()
        s.send(json.dumps(entries).encode() + b"\n")
        # The raw upstream answers a batch's entries one by one: relayed, not assembled.
        assert sorted(json.dumps(s.recv()["id"]) for _ in range(2)) == ["1", "2"]
        s.close()
    with (
        process(raw_upstream(log, up), up),
        process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port),
    ):
        answer = post_batch(f"http://127.0.0.1:{port}/mcp", entries)
        assert [m["id"] for m in answer.json()] == [1, 2]
    # One log for both upstreams: the stdio one's batch, then the HTTP one's.
    assert [m for m in received(log) if "batch" in m] == [{"batch": 2}, {"batch": 2}]


def test_an_http_batch_the_upstream_never_got_is_not_recorded(tmp_path: Path) -> None:
    log, up, port = tmp_path / "log", free_port(), free_port()
    entries = [tool(1, "record", "k-down", label="down"), tool(2, "record", label="du")]
    with process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port):
        url = f"http://127.0.0.1:{port}/mcp"
        down = post_batch(url, entries).json()  # no upstream listening: nothing was sent
        assert [m["id"] for m in down] == [1, 2]
        assert [m["error"]["data"]["type"] for m in down] == ["upstream_unavailable"] * 2
        assert [m["error"]["data"].get("notProcessed") for m in down] == [True, True]
        with process(raw_upstream(log, up), up):  # back: the keyed call runs now, once
            first = post_batch(url, entries).json()
            assert text(first[0])["executions"] == 1
            assert post_batch(url, entries).json()[0]["result"] == first[0]["result"]
    assert executions(log, "down") == 1 and executions(log, "du") == 2
