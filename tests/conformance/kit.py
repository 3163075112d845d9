"""Helpers for the conformance tests: run the kit in-process, start real servers as processes."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from idemtools.cli import main as cli_main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable
LINE = 2 if find_spec("mcp_types") is not None else 1
LEGACY, MODERN = "2025-11-25", "2026-07-28"
ERAS = [LEGACY, MODERN] if LINE == 2 else [LEGACY]
SLOW_MS = "600"


def idemtools_codes_in_reserved_range() -> bool:
    """Whether idemtools' own error codes lie in -32020..-32099, the sub-range the 2026-07-28
    base spec reserves. They moved out; a caller who configures `ErrorCodes` back
    into it fails the check, and so would the proofs, unless they allow it."""
    from idemtools.errors import ErrorCodes

    codes = ErrorCodes()
    values = [getattr(codes, f.name) for f in dataclasses.fields(codes)]
    return any(type(v) is int and -32099 <= v <= -32020 for v in values)


# What idemtools may fail: nothing while its default codes lie outside the reserved range
# (computed, not hard-coded, so default codes moved into that range fail where they should).
IDEMTOOLS_MAY_FAIL = (
    {"mcp-base-error-codes-reserved"} if idemtools_codes_in_reserved_range() else set()
)


@dataclass
class Kit:
    code: int
    report: dict[str, Any]
    out: str
    err: str

    def ids(self, status: str, level: str | None = None) -> set[str]:
        return {
            c["id"]
            for c in self.report.get("checks", [])
            if c["status"] == status and (level is None or c["level"] == level)
        }

    def failures(self, level: str | None = None) -> set[str]:
        """Checks that failed: `fail`, or `blocked` by a failed check (`blocked_by`); a check
        blocked by a missing fixture tool did not run, and is no failure."""
        return {
            c["id"]
            for c in self.report.get("checks", [])
            if (c["status"] == "fail" or (c["status"] == "blocked" and "blocked_by" in c))
            and (level is None or c["level"] == level)
        }

    def by_era(self, status: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for c in self.report.get("checks", []):
            if c["status"] == status:
                out.setdefault(c["era"], set()).add(c["id"])
        return out

    def check(self, check_id: str, era: str = LEGACY) -> dict[str, Any]:
        found = [c for c in self.report["checks"] if c["id"] == check_id and c["era"] == era]
        assert len(found) == 1, (check_id, era, self.out)
        return found[0]


def run_kit(tmp_path: Path, *args: str) -> Kit:
    """`idemtools conformance --json ... ARGS` in this process; the report as parsed JSON."""
    report_path = tmp_path / f"report-{time.monotonic_ns()}.json"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(
            [
                "conformance",
                "--json",
                str(report_path),
                "--slow-ms",
                SLOW_MS,
                "--timeout",
                "20",
                *args,
            ]
        )
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    return Kit(code, report, out.getvalue(), err.getvalue())


def server_command(kind: str, *args: str) -> list[str]:
    return [PY, str(HERE / "servers.py"), kind, *args]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def http_server(kind: str = "example", env: Mapping[str, str] | None = None) -> Iterator[str]:
    """A server process on stateless streamable HTTP; yields its URL once it accepts.

    Its stderr goes to a file, never a pipe nobody reads: a server logging every request would
    fill the pipe and hang.
    """
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            server_command(kind, "--http", str(port), "--stateless"),
            cwd=ROOT,
            env={**os.environ, **dict(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.2),
                ):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    raise RuntimeError(f"server {kind} did not start: {err[-1000:]}")
                time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
