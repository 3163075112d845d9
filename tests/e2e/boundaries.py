"""Drive `boundary_server.py` processes from a test: raw JSON-RPC over a real stdio pipe or over
streamable HTTP, plus the ledger of what the tool really executed and the record in SQLite.

Shared by tests/e2e/test_boundaries.py (the SDK's own server type), tests/fastmcp (standalone
FastMCP) and the stdio soak.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = "2025-11-25"


class Box:
    """One server process's files: the shared ledger, the SQLite store, its stderr logs."""

    def __init__(self, where: Path, kind: str) -> None:
        self.where, self.kind = where, kind
        self.ledger = where / "ledger"
        self.store_url = f"sqlite:///{where / 'records.db'}"
        self._logs = itertools.count()

    def executions(self, label: str | None = None) -> list[str]:
        if not self.ledger.exists():
            return []
        lines = self.ledger.read_text().split()
        return lines if label is None else [x for x in lines if x == label]

    def wait_executed(self, label: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while label not in self.executions():
            if time.monotonic() > deadline:
                raise AssertionError(f"{label} never executed; logs: {self.logs()}")
            time.sleep(0.01)

    def command(self, runner: str, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.e2e.boundary_server",
            self.kind,
            runner,
            str(self.ledger),
            self.store_url,
            *extra,
        ]

    def log_file(self) -> Path:
        return self.where / f"server-{next(self._logs)}.log"

    def logs(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.where.glob("server-*.log")))


def call_params(label: str, key: str, seconds: float) -> dict[str, Any]:
    return {
        "name": "work",
        "arguments": {"label": label, "seconds": seconds},
        "idempotencyKey": key,
    }


def error_type(reply: dict[str, Any] | None) -> str | None:
    data = (reply or {}).get("error", {}).get("data")
    return data.get("type") if isinstance(data, dict) else None


def text(reply: dict[str, Any] | None) -> str:
    content = (reply or {}).get("result", {}).get("content", [])
    return " ".join(block.get("text", "") for block in content)


def _default_interrupts() -> None:
    """In the child, before exec: SIGINT as a terminal would deliver it. A shell that runs the
    suite as a background job (`… &`, no job control) starts it with SIGINT ignored, the child
    would inherit that, and idemtools rightly leaves an ignored signal alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class StdioServer:
    """A server process on stdio; the test is its host (it holds both pipes)."""

    def __init__(self, box: Box) -> None:
        self.log = box.log_file()
        self.proc = subprocess.Popen(
            box.command("stdio"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            cwd=ROOT,
            preexec_fn=_default_interrupts,
        )
        self._ids = itertools.count(1)
        self._buffer = b""
        self.replies: dict[Any, dict[str, Any]] = {}
        reply = self.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "boundary-test", "version": "0"},
            },
        )
        assert "result" in reply, reply
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def start(self, method: str, params: dict[str, Any]) -> int:
        rid = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return rid

    def _parse(self) -> None:
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip():
                message = json.loads(line)
                if "id" in message and ("result" in message or "error" in message):
                    self.replies[message["id"]] = message

    def collect(self, timeout: float, until: int | None = None) -> bool:
        """Read replies for up to `timeout` seconds (or until the reply to `until` is in);
        False once stdout has ended."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0 and until not in self.replies:
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                self._parse()
                return False
            self._buffer += chunk
            self._parse()
        return True

    def wait(self, rid: int, timeout: float = 20.0) -> dict[str, Any] | None:
        """The reply to `rid`, or None when stdout ended (the process exited) first."""
        deadline = time.monotonic() + timeout
        self._parse()
        while rid not in self.replies:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no reply to {rid} within {timeout} s")
            if not self.collect(left, until=rid) and rid not in self.replies:
                return None
        return self.replies[rid]

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        reply = self.wait(self.start(method, params))
        assert reply is not None, f"server exited; log: {self.log.read_text()}"
        return reply

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def exited_within(self, timeout: float) -> float:
        """Wait for the process to exit; seconds it took. Fails (and kills it) past timeout."""
        began = time.monotonic()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"server still running {timeout} s later; log: {self.log.read_text()}"
            ) from None
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        """End it as a host does: stdin closed, then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            if self.proc.stdin is not None and not self.proc.stdin.closed:
                self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        for stream in (self.proc.stdout,):
            if stream is not None:
                stream.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _reply(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a response, a plain JSON body or an SSE stream; {} if none."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                message: dict[str, Any] = json.loads(line[5:])
                if "result" in message or "error" in message:
                    return message
        return {}
    parsed: dict[str, Any] = response.json() if response.content else {}
    return parsed


class HttpServer:
    """A server process on streamable HTTP (stateful), through `runner` ("http", "uvicorn")."""

    def __init__(self, box: Box, runner: str) -> None:
        self.port = free_port()
        self.log = box.log_file()
        self.proc = subprocess.Popen(
            box.command(runner, str(self.port)),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
            cwd=ROOT,
            preexec_fn=_default_interrupts,
        )
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"did not start: {self.log.read_text()}") from None
                time.sleep(0.05)
        self.client = httpx.Client(timeout=30)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        response = self.client.post(
            self.url,
            headers=self.headers,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "boundary-test", "version": "0"},
                },
            },
        )
        session = response.headers.get("mcp-session-id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        # The version the server chose (mcp 1.21 predates 2025-11-25).
        agreed = _reply(response).get("result", {}).get("protocolVersion", PROTOCOL)
        self.headers["MCP-Protocol-Version"] = agreed
        self.client.post(
            self.url,
            headers=self.headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )

    def call(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """A tools/call; None when the connection dropped before an answer."""
        try:
            response = self.client.post(
                self.url,
                headers=self.headers,
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
            )
        except httpx.HTTPError:
            return None
        return _reply(response) or None

    def call_in_background(self, params: dict[str, Any]) -> threading.Thread:
        thread = threading.Thread(target=self.call, args=(params,), daemon=True)
        thread.start()
        return thread

    def exited_within(self, timeout: float) -> float:
        began = time.monotonic()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(
                f"server still running {timeout} s later; log: {self.log.read_text()}"
            ) from None
        return time.monotonic() - began

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


# -- the scenarios, shared by every server type ------------------------------------------------

TOOL_SECONDS = 1.5  # the tool's await after its side effect: the transport ends inside it
EXIT_WITHIN = 15.0  # bounded: the lease is 30 s, the tool 1.5 s


def replayed_from(
    box: Box,
    key: str,
    label: str,
    pid: int,
    *,
    seconds: float = TOOL_SECONDS,
    http: str | None = None,
) -> None:
    """The retry, on a new server process, replays what process `pid` recorded; nothing ran."""
    params = call_params(label, key, seconds)
    if http is None:
        server = StdioServer(box)
        try:
            reply: dict[str, Any] | None = server.request("tools/call", params)
        finally:
            server.stop()
    else:
        served = HttpServer(box, http)
        try:
            reply = served.call(params)
        finally:
            served.stop()
    assert reply is not None and "result" in reply, (reply, box.logs())
    assert f"done {label} pid {pid}" in text(reply), reply  # the first process's outcome
    assert box.executions(label) == [label], box.executions()


def stdio_end(box: Box, how: str) -> None:
    """A keyed call is running on stdio (side effect done); the host ends the transport."""
    server = StdioServer(box)
    pid = server.proc.pid
    try:
        rid = server.start("tools/call", call_params("a", "k-end", TOOL_SECONDS))
        box.wait_executed("a")
        if how == "eof":  # a desktop host restarting: it closes the pipe
            server.close_stdin()
        elif how == "sigterm":
            server.signal(signal.SIGTERM)
        elif how == "sigint":  # interrupted, then the pipe closed (the SDK reads until EOF)
            server.signal(signal.SIGINT)
            time.sleep(0.2)
            server.close_stdin()
        else:
            raise ValueError(how)
        server.exited_within(EXIT_WITHIN)
        if how == "sigterm":
            # The transport stayed up while the call finished: its own answer reached the host.
            answer = server.wait(rid, timeout=1)
            assert answer is not None and f"pid {pid}" in text(answer), answer
    finally:
        server.stop()
    replayed_from(box, "k-end", "a", pid)


def stdio_second_interrupt(box: Box) -> None:
    """Ctrl-C twice: the process ends at once, says what it abandoned; the claim lapses by
    lease (the retry meanwhile is refused in_progress, never run)."""
    server = StdioServer(box)
    try:
        server.start("tools/call", call_params("b", "k-twice", 10.0))
        box.wait_executed("b")
        server.signal(signal.SIGINT)
        time.sleep(0.3)
        server.signal(signal.SIGINT)
        took = server.exited_within(5.0)
        assert took < 3.0, took  # "at once": long before the 10 s tool would have ended
    finally:
        server.stop()
    assert "second SIGINT: exiting at once; 1 keyed call(s) still running" in server.log.read_text()
    retry = StdioServer(box)
    try:
        reply = retry.request("tools/call", call_params("b", "k-twice", 10.0))
    finally:
        retry.stop()
    assert error_type(reply) == "idempotency_key_in_progress", reply
    assert box.executions("b") == ["b"]


def stdio_grace_ends(box: Box) -> None:
    """`shutdown_grace` bounds the wait: past it the process exits, logging what it left."""
    os.environ["BOUNDARY_GRACE"] = "0.5"
    try:
        server = StdioServer(box)
    finally:
        del os.environ["BOUNDARY_GRACE"]
    try:
        server.start("tools/call", call_params("c", "k-grace", 10.0))
        box.wait_executed("c")
        # SIGTERM, not EOF: mcp 1.21 itself waits for its handlers at EOF, whatever the grace.
        server.signal(signal.SIGTERM)
        took = server.exited_within(8.0)
        assert took < 6.0, took
    finally:
        server.stop()
    # The engine logs each call still running when the grace ends, at ERROR.
    errors = [line for line in server.log.read_text().splitlines() if line.startswith("ERROR ")]
    assert errors, server.log.read_text()


def stdio_user_sigterm_handler(box: Box) -> None:
    """An application's own SIGTERM handler is chained to, once, at once; idemtools neither
    skips it nor exits in its place (the handler chose not to exit); the call is recorded."""
    noted = box.where / "user-handler"
    os.environ["BOUNDARY_USER_SIGTERM"] = str(noted)
    try:
        server = StdioServer(box)
    finally:
        del os.environ["BOUNDARY_USER_SIGTERM"]
    pid = server.proc.pid
    try:
        rid = server.start("tools/call", call_params("d", "k-user", TOOL_SECONDS))
        box.wait_executed("d")
        server.signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not noted.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert noted.exists(), "the application's SIGTERM handler was not called"
        assert "done d" in text(server.wait(rid)), "the call in flight was not answered"
        assert server.proc.poll() is None, "idemtools exited in place of the user's handler"
        server.close_stdin()
        server.exited_within(EXIT_WITHIN)
    finally:
        server.stop()
    assert noted.read_text().splitlines() == [f"user handler {int(signal.SIGTERM)}"]
    replayed_from(box, "k-user", "d", pid)


def http_sigterm(box: Box, runner: str) -> None:
    """SIGTERM while a keyed call runs over streamable HTTP (uvicorn handles the signal and
    shuts the ASGI lifespan down); the retry on a new process replays."""
    served = HttpServer(box, runner)
    pid = served.proc.pid
    try:
        served.call_in_background(call_params("h", "k-http", 3.0))
        box.wait_executed("h")
        served.proc.send_signal(signal.SIGTERM)
        served.exited_within(EXIT_WITHIN)
    finally:
        served.stop()
    replayed_from(box, "k-http", "h", pid, seconds=3.0, http=runner)
