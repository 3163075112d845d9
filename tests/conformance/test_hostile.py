"""Hostile targets: every run ends within its deadline with exit 1 or 2 and a
message saying what the target did, with bounded memory and no traceback on stderr.

Each run is a real `idemtools conformance` process (its peak RSS is measured there) against a
target from hostile.py, with a small --timeout and --deadline.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .kit import HERE, PY, ROOT, free_port, server_command

pytestmark = [pytest.mark.sdk_free, pytest.mark.slow]

HOSTILE = str(HERE / "hostile.py")
PEAK_MIB = 400  # the kit holds at most one capped message (16 MiB) at a time
# The kit's own peak: VmHWM belongs to this process image alone. ru_maxrss would also count the
# image before exec (Linux keeps it across execve), that is the forking pytest worker's size.
WRAPPER = """
import json, resource, sys
from idemtools.cli import main
code = main(sys.argv[2:])
def peak_kib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "peak_kib": peak_kib()}, out)
sys.exit(code)
"""


@dataclass
class Run:
    code: int
    out: str
    err: str
    elapsed: float
    peak_mib: float
    report: dict[str, Any]

    @property
    def text(self) -> str:
        return self.out + self.err


def kit(tmp_path: Path, *args: str, deadline: float) -> Run:
    stats = tmp_path / f"stats-{time.monotonic_ns()}.json"
    report = tmp_path / f"report-{time.monotonic_ns()}.json"
    argv = ["conformance", "--json", str(report), "--timeout", "1", "--deadline", str(deadline)]
    argv += ["--slow-ms", "100"]
    start = time.monotonic()
    proc = subprocess.run(
        [PY, "-c", WRAPPER, str(stats), *argv, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=deadline + 60,
    )
    elapsed = time.monotonic() - start
    peak = json.loads(stats.read_text())["peak_kib"] / 1024 if stats.exists() else float("nan")
    parsed = json.loads(report.read_text()) if report.exists() else {}
    run = Run(proc.returncode, proc.stdout, proc.stderr, elapsed, peak, parsed)
    print(f"{args[-1]}: exit {run.code} in {elapsed:.1f} s, peak RSS {peak:.0f} MiB")
    assert "Traceback" not in run.err and "never retrieved" not in run.err, run.err
    assert run.code in (1, 2), run.text
    assert run.peak_mib < PEAK_MIB, run.peak_mib
    return run


def stdio(mode: str) -> list[str]:
    return ["--", PY, HOSTILE, mode]


@contextlib.contextmanager
def http_target(mode: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [PY, HOSTILE, "--http", str(port), mode],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait()


def test_hang_on_every_call_stops_at_the_deadline(tmp_path: Path) -> None:
    run = kit(tmp_path, *stdio("hang"), deadline=6)
    assert run.elapsed < 6 + 6, run.elapsed  # not 11 x --timeout per era
    assert run.code == 1, run.text  # the calls that timed out failed their MUST checks
    assert "no answer to tools/call within 1 s" in run.out
    assert "--deadline" in run.err and "did not run" in run.err, run.err
    assert run.report["stopped"]["not_run"] > 0 and run.report["summary"]["exit_code"] == 1


def test_deadline_without_a_failure_is_inconclusive(tmp_path: Path) -> None:
    """A healthy server and a deadline too short for it: what ran passed, the rest did not run,
    so the run is neither conformant nor failed: exit 2, never 0."""
    command = ["--", *server_command("example")]
    run = kit(tmp_path, "--timeout", "30", "--slow-ms", "10000", *command, deadline=6)
    assert run.code == 2, run.text
    assert "--deadline" in run.err, run.err
    if run.report:  # else the deadline passed while opening, on a very loaded machine
        assert run.out.splitlines()[-1].startswith("incomplete"), run.out
        assert run.report["stopped"]["not_run"] > 0 and run.report["summary"]["exit_code"] == 2
        assert "sep-3182-duplicate-not-executed" in {
            c["id"] for c in run.report["checks"] if c["status"] == "pass"
        }


def test_giant_line_is_reported_and_later_requests_go_on(tmp_path: Path) -> None:
    run = kit(tmp_path, "--timeout", "10", *stdio("giant"), deadline=60)
    assert "over the 16777216-byte cap" in run.out, run.text
    assert "process ended" not in run.text
    assert run.elapsed < 10, run.elapsed  # no later request waited its --timeout
    assert run.code == 1  # the target has no idempotency behind its first answer
    assert "sep-3182-duplicate-not-executed" in run.out


def test_garbage_is_reported_as_garbage(tmp_path: Path) -> None:
    run = kit(tmp_path, *stdio("garbage"), deadline=5)
    assert run.elapsed < 5 + 6, run.elapsed
    assert "not JSON" in run.out, run.text


def test_wrong_ids_are_reported_as_wrong_ids(tmp_path: Path) -> None:
    run = kit(tmp_path, *stdio("wrong-id"), deadline=5)
    assert run.elapsed < 5 + 6, run.elapsed
    assert "ids the kit never sent" in run.out, run.text


def test_flood_of_server_requests_cannot_deadlock_the_reader(tmp_path: Path) -> None:
    run = kit(tmp_path, *stdio("flood"), deadline=5)
    assert run.elapsed < 5 + 6, run.elapsed
    assert "requests of its own" in run.out, run.text


def test_reader_keeps_reading_while_the_server_ignores_its_answers(tmp_path: Path) -> None:
    """20000 pings before the first answer, none of the kit's answers to them read meanwhile:
    the reader goes on reading (its answers wait in the bounded outbox or are dropped), and
    every check is decided on its merits. (Endless, the same flood would hang a reader that
    stopped reading for good: test_flood_of_server_requests_cannot_deadlock_the_reader.)"""
    run = kit(tmp_path, "--timeout", "10", *stdio("flood-answer"), deadline=60)
    assert run.code == 1, run.text
    detail = next(
        c["detail"] for c in run.report["checks"] if c["id"] == "sep-3182-duplicate-not-executed"
    )
    assert "2 executions" in detail, detail  # decided on its merits, not a wire failure
    assert "wire failure" not in run.out and "stopped" not in run.report, run.text


def test_crash_mid_run_stops_the_run(tmp_path: Path) -> None:
    run = kit(tmp_path, "--timeout", "10", *stdio("crash"), deadline=60)
    assert run.elapsed < 10, run.elapsed
    assert run.code == 1, run.text
    assert "the server process ended (exit status 3)" in run.text, run.text
    assert "crashing now" in run.text
    assert "did not run" in run.err, run.err


def test_endless_sse_body_is_bounded_by_the_request_deadline(tmp_path: Path) -> None:
    with http_target("drip") as url:
        run = kit(tmp_path, url, deadline=5)
    assert run.elapsed < 5 + 6, run.elapsed
    assert "no answer to tools/call within 1 s" in run.out, run.text


def test_endless_fast_body_is_bounded_by_the_size_cap(tmp_path: Path) -> None:
    with http_target("bigbody") as url:
        run = kit(tmp_path, "--max-message-bytes", "1000000", "--timeout", "20", url, deadline=8)
    assert "over the 1000000-byte cap" in run.out, run.text
