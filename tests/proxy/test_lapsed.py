"""A proxy killed while a keyed call is forwarded leaves a lapsed claim in its durable store;
the retry, on a proxy started anew over the same store, follows the tool's `on_lapse` from the
configuration, as the library does: `"refuse"` answers `idempotency_outcome_unknown` and
forwards nothing, the default (`"rerun"`) forwards the call again, logged at ERROR.

Real processes: the proxy and its upstream (tests/proxy/upstream.py, which logs every call it
receives, so executions are counted there) over a SQLite store; the proxy is SIGKILLed once
the upstream has the call, which ends the upstream too (its stdin closes).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .helpers import executions
from .test_stdio import UNKNOWN, config, start

pytestmark = pytest.mark.slow

LEASE = 1.0


def _killed_mid_call(tmp_path: Path, policy: str) -> dict[str, Any]:
    """The `slow` call's params, after a proxy died while the upstream was running it."""
    options = ("--config", config(tmp_path, f'[tools.slow]\nlease = "{LEASE:g}s"\n{policy}'))
    params = {"name": "slow", "arguments": {"label": "d", "ms": 1500}, "idempotencyKey": "k-d"}
    log = tmp_path / "log"
    with start(tmp_path, *options) as s:
        s.initialize()
        s.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        deadline = time.monotonic() + 15
        while executions(log, "d") == 0:
            assert time.monotonic() < deadline, f"the upstream never got the call: {s.err()}"
            time.sleep(0.02)
        s.proc.kill()  # SIGKILL: nothing records the call's end
        s.proc.wait()
    time.sleep(LEASE * 3)  # the claim's lease runs out: a lapsed claim, kept by the store
    return params


def test_on_lapse_refuse_answers_unknown_and_forwards_nothing(tmp_path: Path) -> None:
    params = _killed_mid_call(tmp_path, 'on_lapse = "refuse"\n')
    options = ("--config", str(tmp_path / "proxy.toml"))
    with start(tmp_path, *options) as s:
        s.initialize()
        retry = s.request(2, "tools/call", params)
        assert retry["error"]["data"]["type"] == UNKNOWN, retry
        again = s.request(3, "tools/call", params)
        assert again["error"] == retry["error"], again
        s.close()
        err = s.err()
    assert executions(tmp_path / "log", "d") == 1, "the retry must not be forwarded"
    assert "lapsed claim found" in err and "on_lapse=refuse" in err, err


def test_by_default_the_retry_forwards_the_call_again_and_says_so(tmp_path: Path) -> None:
    params = _killed_mid_call(tmp_path, "")
    options = ("--config", str(tmp_path / "proxy.toml"))
    with start(tmp_path, *options) as s:
        s.initialize()
        retry = s.request(2, "tools/call", params)
        assert "result" in retry, retry
        assert s.request(3, "tools/call", params)["result"] == retry["result"]
        s.close()
        err = s.err()
    assert executions(tmp_path / "log", "d") == 2
    assert "lapsed claim found" in err and "on_lapse=rerun" in err, err
