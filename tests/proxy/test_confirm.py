"""`--confirm-credential` with `--scope token-hash`: a replay only for a credential the upstream
still accepts (an upstream that rejects a revoked token with HTTP 401)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.conformance.kit import free_port

from .helpers import PY, ROOT, UPSTREAM, executions
from .test_http import call, post, process, proxy, wait_port

pytestmark = pytest.mark.slow

UNAUTHORIZED = "idempotency_unauthorized"


def run(tmp_path: Path) -> tuple[Path, Path, list[str], int, int]:
    log, tokens, up, port = tmp_path / "log", tmp_path / "tokens", free_port(), free_port()
    tokens.write_text("alice-1\nbob-1\n")
    upstream = [PY, str(UPSTREAM), str(log), "--http", str(up), "--tokens", str(tokens)]
    return log, tokens, upstream, up, port


def test_a_revoked_token_gets_no_replay_once_its_confirmation_expires(tmp_path: Path) -> None:
    log, tokens, upstream, up, port = run(tmp_path)
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash",
                 "--confirm-credential", "0.5")  # fmt: skip
    with process(upstream, up), process(argv, port):
        url = f"http://127.0.0.1:{port}/mcp"
        first = post(url, call(1, "record", "k-1", label="rv"), "alice-1")
        assert "result" in first
        assert post(url, call(2, "record", "k-1", label="rv"), "alice-1") == {**first, "id": 2}
        tokens.write_text("bob-1\n")  # the upstream revokes alice-1
        time.sleep(1.0)  # past the confirmation's 0.5 s
        refused = post(url, call(3, "record", "k-1", label="rv"), "alice-1")
        assert refused["error"]["data"]["type"] == UNAUTHORIZED
        other = post(url, call(4, "record", "k-2", label="bob"), "bob-1")
        assert "result" in other  # a credential the upstream accepts is not affected
        tokens.write_text("alice-1\nbob-1\n")  # reinstated: a refusal is never remembered
        assert post(url, call(5, "record", "k-1", label="rv"), "alice-1") == {**first, "id": 5}
    assert executions(log, "rv") == 1 and executions(log, "bob") == 1


def test_within_the_cache_window_no_confirmation_is_sent(tmp_path: Path) -> None:
    log, _, upstream, up, port = run(tmp_path)
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash",
                 "--confirm-credential", "60")  # fmt: skip
    with process(upstream, up), process(argv, port):
        url = f"http://127.0.0.1:{port}/mcp"
        for rid in range(1, 6):
            assert "result" in post(url, call(rid, "record", "k-1", label="c"), "alice-1")
    pings = [m for m in log.read_text().splitlines() if '"ping"' in m]
    assert len(pings) == 1 and executions(log, "c") == 1


def test_without_it_possessing_the_token_replays_and_start_up_says_so(tmp_path: Path) -> None:
    log, tokens, upstream, up, port = run(tmp_path)
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash")
    with process(upstream, up), open(tmp_path / "stderr", "wb") as err:
        front = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_port(port, front, err)
            url = f"http://127.0.0.1:{port}/mcp"
            first = post(url, call(1, "record", "k-1", label="nc"), "alice-1")
            tokens.write_text("bob-1\n")
            assert post(url, call(2, "record", "k-1", label="nc"), "alice-1") == {**first, "id": 2}
        finally:
            front.terminate()
            front.wait(15)
    assert executions(log, "nc") == 1
    assert "possessing the token authorizes replays" in (tmp_path / "stderr").read_text()
