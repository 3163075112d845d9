"""`benchmarks/bench_default_store.py` still runs and prints every row docs/benchmarks.md
reports (a few calls and one server start: a smoke run, not a measurement)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "bench_default_store.py"
ROWS = {
    "start-up: store + first read",
    "start-up again: the file exists",
    "per call: claim + complete",
    "per call: replay (claim)",
    "stdio process: start, initialize, 1 keyed call",
}


@pytest.mark.slow
@pytest.mark.once
def test_the_default_store_benchmark_prints_each_row_with_its_ratio(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("IDEMTOOLS_STORE", "XDG_STATE_HOME")}
    env["HOME"] = str(tmp_path)  # the benchmark keeps its records in a state directory of its own
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "5", "--starts", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {}
    for line in done.stdout.splitlines()[2:]:
        what, default, memory, ratio = (cell.strip() for cell in line.strip("|").split("|"))
        assert default and memory
        rows[what] = float(ratio.rstrip("×"))
    assert set(rows) == ROWS
    assert all(ratio > 0 for ratio in rows.values())
    assert not list(tmp_path.rglob("*")), list(tmp_path.rglob("*"))
