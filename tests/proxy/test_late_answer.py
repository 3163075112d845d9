"""The proxy follows the library's `max_runtime` rule: an upstream still silent past the tool's
`max_runtime` is answered `idempotency_outcome_unknown` (recorded, never forwarded twice), and
its late answer, when it comes, replaces that record, so later retries replay the real result.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .helpers import executions
from .test_stdio import UNKNOWN, config, start

pytestmark = pytest.mark.slow


def test_a_late_upstream_answer_replaces_the_unknown_record(tmp_path: Path) -> None:
    log = tmp_path / "log"
    options = ("--config", config(tmp_path, '[tools.slow]\nmax_runtime = "1s"\n'))
    with start(tmp_path, *options) as s:
        s.initialize()
        first = s.call(1, "slow", "k-late", label="late", ms=2500)
        assert first["error"]["data"]["type"] == UNKNOWN, first
        during = s.call(2, "slow", "k-late", label="late", ms=2500)
        assert during["error"]["data"]["type"] == UNKNOWN, during
        deadline = time.monotonic() + 15
        rid = 3
        while True:  # the upstream answers 2.5 s after it was sent
            later = s.call(rid, "slow", "k-late", label="late", ms=2500)
            if "result" in later or time.monotonic() > deadline:
                break
            rid += 1
            time.sleep(0.2)
        assert "result" in later, later
        assert s.call(rid + 1, "slow", "k-late", label="late", ms=2500)["result"] == later["result"]
        s.proc.kill()
    assert executions(log, "late") == 1
