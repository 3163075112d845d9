"""The stdio proxy in front of a raw upstream process: keyed calls, faults, shutdown.

Every test runs `idemtools proxy` and its upstream (tests/proxy/upstream.py) as real processes;
the upstream logs every message it receives, so "never two executions" is counted there.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from .helpers import Session, executions, proxy_argv, received, upstream_argv

pytestmark = pytest.mark.slow

UNKNOWN = "idempotency_outcome_unknown"


def start(tmp_path: Path, *options: str) -> Session:
    store = f"sqlite:///{tmp_path / 'proxy.db'}"
    return Session(proxy_argv("--store", store, *options, upstream=upstream_argv(tmp_path / "log")))


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "proxy.toml"
    path.write_text(text)
    return str(path)


def test_keyed_calls_run_once_and_unkeyed_calls_pass_through(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        init = s.initialize()
        assert init["result"]["capabilities"]["tools"] == {"listChanged": True, "idempotency": {}}
        first = s.call(1, "record", "k-1", label="a")
        again = s.call(2, "record", "k-1", label="a")
        assert again["result"] == first["result"] and again["id"] == 2
        conflict = s.call(3, "record", "k-1", label="other")
        assert conflict["error"]["data"]["type"] == "idempotency_key_conflict"
        s.call(4, "record", label="u")
        s.call(5, "record", label="u")
        assert s.close() == 0
    assert executions(log, "a") == 1 and executions(log, "other") == 0
    assert executions(log, "u") == 2
    calls = [m for m in received(log) if m.get("method") == "tools/call"]
    assert all("idempotencyKey" not in m["params"] for m in calls)  # stripped by default


def test_forward_key_passes_the_key_upstream(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path, "--forward-key") as s:
        s.initialize()
        s.call(1, "record", "k-fwd", label="f")
        s.close()
    calls = [m for m in received(log) if m.get("method") == "tools/call"]
    assert [m["params"]["idempotencyKey"] for m in calls] == ["k-fwd"]


def test_upstream_death_mid_call_is_the_outcome_and_never_runs_twice(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        lost = s.call(1, "die", "k-die", label="d")
        assert lost["error"]["data"] == {"type": UNKNOWN, "idempotencyKey": "k-die"}
        assert s.close() == 3  # the child's exit ends the proxy, with the child's status
    with start(tmp_path) as s:  # a new proxy and upstream on the same store
        s.initialize()
        replay = s.call(1, "die", "k-die", label="d")
        assert replay["error"] == lost["error"]
        s.close()
    assert executions(log, "d") == 1


def test_sigterm_mid_call_finishes_records_and_answers(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        s.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "slow",
                    "arguments": {"label": "t", "ms": 1200},
                    "idempotencyKey": "k-term",
                },
            }
        )
        deadline = time.monotonic() + 10
        while executions(log, "t") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        s.proc.send_signal(signal.SIGTERM)
        answer = s.answer(1)
        assert "result" in answer, answer
        assert s.proc.wait(20) == 0
    with start(tmp_path) as s:
        s.initialize()
        assert s.call(1, "slow", "k-term", label="t", ms=1200)["result"] == answer["result"]
        s.close()
    assert executions(log, "t") == 1


def test_slow_upstream_past_the_lease_is_renewed_not_run_again(tmp_path: Path) -> None:
    log = tmp_path / "log"
    options = ("--config", config(tmp_path, '[default]\nlease = "1s"\n'))
    with start(tmp_path, *options) as s:
        s.initialize()
        params = {"name": "slow", "arguments": {"label": "l", "ms": 2500}, "idempotencyKey": "k-l"}
        s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        time.sleep(1.8)  # well past the 1 s lease: only renewal keeps the claim
        busy = s.request(2, "tools/call", params)
        assert busy["error"]["data"]["type"] == "idempotency_key_in_progress", busy
        original = s.answer(1)
        assert s.request(3, "tools/call", params)["result"] == original["result"]
        s.close()
    assert executions(log, "l") == 1


def test_max_runtime_bounds_an_upstream_that_never_answers(tmp_path: Path) -> None:
    log = tmp_path / "log"
    options = ("--config", config(tmp_path, '[tools.slow]\nmax_runtime = "1s"\n'))
    with start(tmp_path, *options) as s:
        s.initialize()
        began = time.monotonic()
        first = s.call(1, "slow", "k-hang", label="h", ms=6000)
        assert time.monotonic() - began < 5
        assert first["error"]["data"]["type"] == UNKNOWN
        assert s.call(2, "slow", "k-hang", label="h", ms=6000)["error"] == first["error"]
        s.proc.kill()
    assert executions(log, "h") == 1


def test_cancellation_of_a_keyed_call_is_not_forwarded(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        keyed = {"name": "slow", "arguments": {"label": "c", "ms": 600}, "idempotencyKey": "k-c"}
        unkeyed = {"name": "slow", "arguments": {"label": "cu", "ms": 600}}
        s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": keyed})
        s.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": unkeyed})
        for rid in (1, 2):
            s.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": rid, "reason": "test"},
                }
            )
        s.answer(2)  # the raw upstream answers cancelled calls anyway
        original = s.answer(1)  # the execution went on: the proxy still sends its answer
        retry = s.request(3, "tools/call", keyed)
        assert retry["result"] == original["result"], retry
        s.close()
    cancels = [m for m in received(log) if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancels] == [2]
    assert executions(log, "c") == 1


def test_unknown_tool_is_answered_not_recorded_and_a_tool_error_is_recorded(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        for rid in (1, 2):
            unknown = s.call(rid, "nope", "k-nope", label="n")
            assert unknown["error"]["message"] == "Unknown tool: nope"
        failed = s.call(3, "fail", "k-fail", label="e")
        assert failed["error"]["code"] == 1001
        assert s.call(4, "fail", "k-fail", label="e")["error"] == failed["error"]
        s.close()
    assert executions(log, "n") == 2  # nothing ran: each call reached the upstream
    assert executions(log, "e") == 1


def test_server_requests_during_a_keyed_call_reach_the_client(tmp_path: Path) -> None:
    with start(tmp_path) as s:
        s.initialize()
        s.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "sample", "arguments": {"label": "q"}, "idempotencyKey": "k-s"},
            }
        )
        request = s.recv()
        assert (
            request["method"] == "sampling/createMessage" and request["id"] == "s-idemtools-proxy:1"
        )
        s.send(
            {"jsonrpc": "2.0", "id": request["id"], "result": {"model": "m", "role": "assistant"}}
        )
        answer = s.answer(1)
        assert '"model": "m"' in answer["result"]["content"][0]["text"]
        s.close()


def test_messages_over_many_reads_and_several_in_one_read_are_relayed_whole(
    tmp_path: Path,
) -> None:
    # 3 MB lines arrive in many reads (the relay reads 64 KiB at a time) and are written whole
    # in both directions; a keyed one is still seen as keyed although its marker is mid-line
    # (300 KB: under the engine's max_outcome_bytes, so that its answer is what replays).
    log, big, keyed = tmp_path / "log", "x" * (3 << 20), "y" * 300_000
    with start(tmp_path) as s:
        s.initialize()
        unkeyed = s.call(1, "record", label=big)
        assert big in unkeyed["result"]["content"][0]["text"]
        first = s.call(2, "record", "k-big", label=keyed)
        assert keyed in first["result"]["content"][0]["text"]
        assert s.call(3, "record", "k-big", label=keyed)["result"] == first["result"]
        # Two whole messages in one write: both relayed, each answered under its own id.
        line = b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n'
        s.send(line % 4 + line % 5)
        assert s.answer(5)["result"] == {} and s.answer(4)["result"] == {}
        assert s.close() == 0
    assert executions(log, big) == 1 and executions(log, keyed) == 1  # the replay did not run


def test_arguments_that_differ_only_in_a_large_integer_conflict(tmp_path: Path) -> None:
    log = tmp_path / "log"
    big = 12345678901234567890123  # one double stands for both it and big + 1
    with start(tmp_path) as s:
        s.initialize()
        first = s.call(1, "record", "k-big", label="big", n=big)
        assert "result" in first, first
        other = s.call(2, "record", "k-big", label="big", n=big + 1)
        assert other["error"]["data"]["type"] == "idempotency_key_conflict", other
        assert s.call(3, "record", "k-big", label="big", n=big)["result"] == first["result"]
        assert s.close() == 0
    assert executions(log, "big") == 1
    [sent] = [m for m in received(log) if m.get("method") == "tools/call"]
    assert sent["params"]["arguments"]["n"] == big
