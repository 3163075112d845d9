"""A raw stdio JSON-RPC client for the proxy tests: real processes, bounded waits."""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable
UPSTREAM = HERE / "upstream.py"
LEGACY = "2025-11-25"


def proxy_argv(*options: str, upstream: Sequence[str]) -> list[str]:
    return [PY, "-m", "idemtools.cli", "proxy", *options, "--", *upstream]


def upstream_argv(log: Path) -> list[str]:
    return [PY, str(UPSTREAM), str(log)]


def executions(log: Path, label: str) -> int:
    """How many tools/call for `label` the upstream received (across its processes)."""
    if not log.exists():
        return 0
    n = 0
    for line in log.read_text().splitlines():
        message = json.loads(line)
        if not isinstance(message, dict):
            continue
        params = message.get("params") or {}
        if (
            message.get("method") == "tools/call"
            and (params.get("arguments") or {}).get("label") == label
        ):
            n += 1
    return n


def received(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


class Session:
    """One stdio connection: the process, and every line it writes, in order."""

    def __init__(self, argv: Sequence[str]) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
        self.proc = subprocess.Popen(
            list(argv), cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.raw: list[bytes] = []
        self.stash: dict[str, dict[str, Any]] = {}  # answers that came before they were awaited
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout: float = 15.0) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout} s; stderr: {self.err()}") from None
        if not line:
            raise EOFError(f"the process closed stdout; stderr: {self.err()}")
        self.raw.append(line)
        message: dict[str, Any] = json.loads(line)
        return message

    def answer(self, rid: Any, timeout: float = 15.0) -> dict[str, Any]:
        """The response to `rid`; other answers wait in `stash`, every line is in `raw`."""
        deadline = time.monotonic() + timeout
        key = json.dumps(rid)
        while key not in self.stash:
            message = self.recv(max(0.05, deadline - time.monotonic()))
            if "method" not in message and "id" in message:
                self.stash[json.dumps(message["id"])] = message
        return self.stash.pop(key)

    def request(self, rid: Any, method: str, params: dict[str, Any] | None = None) -> Any:
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        return self.answer(rid)

    def initialize(self) -> dict[str, Any]:
        reply = self.request(
            0,
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {"sampling": {}},
                "clientInfo": {"name": "proxy-tests", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return reply

    def call(self, rid: Any, name: str, key: str | None = None, **arguments: Any) -> Any:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if key is not None:
            params["idempotencyKey"] = key
        return self.request(rid, "tools/call", params)

    def err(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-2000:]

    def close(self, timeout: float = 20.0) -> int:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the process did not end within {timeout} s") from None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()
