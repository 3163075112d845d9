"""`benchmarks/bench_transports.py` still runs and prints every row docs/benchmarks.md reports,
over stdio and HTTP, and on each store shorthand (a few calls: a smoke run, not a measurement)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.services import need_postgres, need_redis

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "bench_transports.py"
KINDS = ["bare", "first", "replay", "unkeyed"]


def run(*options: str) -> dict[tuple[str, str], float]:
    """The benchmark's table: (transport, call) → round trip × bare."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--calls", "3", *options],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {}
    for line in done.stdout.splitlines()[3:]:
        transport, kind, _, ratio, _, _ = (cell.strip() for cell in line.strip("|").split("|"))
        rows[transport, kind] = float(ratio)
    return rows


@pytest.mark.slow
@pytest.mark.once
def test_the_transport_benchmark_prints_each_call_over_stdio_and_http() -> None:
    rows = run("--control")
    assert list(rows) == [
        (t, k) for t in ("stdio", "http") for k in ["bare", "control", *KINDS[1:]]
    ]
    assert all(ratio > 0 for ratio in rows.values())
    assert rows["stdio", "bare"] == rows["http", "bare"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize(
    "store",
    [
        pytest.param("sqlite", marks=pytest.mark.once),
        pytest.param("redis", marks=pytest.mark.services),
        pytest.param("postgres", marks=pytest.mark.services),
    ],
)
def test_the_transport_benchmark_runs_on_each_store_shorthand(store: str) -> None:
    if store == "redis":
        need_redis()
    elif store == "postgres":
        need_postgres()
    rows = run("--store", store, "--transports", "stdio")
    assert list(rows) == [("stdio", k) for k in KINDS]
