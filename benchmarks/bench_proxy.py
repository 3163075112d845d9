"""`idemtools proxy` against a trivial TypeScript tool: direct vs through the proxy, side by side.

    python benchmarks/bench_proxy.py [--calls N] [--store URL]

Rows, each as p50 / p99 latency of sequential calls (one client, one in flight), stdio and
HTTP: unkeyed calls direct and through the proxy; keyed first executions (a new key each call)
and replays (one key) through the proxy; the ratios to direct. The tool is the fixture server's
`sep3182_record` on @modelcontextprotocol/sdk (tests/conformance/ts_server; `npm ci` there
first). Clients speak raw JSON-RPC (no SDK), so the figures are the servers' and the proxy's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
TS = ROOT / "tests" / "conformance" / "ts_server"
PY = sys.executable
LEGACY = "2025-11-25"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def proxy(*options: str) -> list[str]:
    return [PY, "-m", "idemtools.cli", "proxy", *options]


class Stdio:
    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
        self.rid = 0
        self.request("initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "1"}})  # fmt: skip
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.rid += 1
        self.send({"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params})
        assert self.proc.stdout is not None
        while True:
            message = json.loads(self.proc.stdout.readline())
            if message.get("id") == self.rid:
                return message

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(20)


class Http:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=30)
        self.rid = 0
        self.headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": LEGACY,
            "authorization": "Bearer bench",
        }

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.rid += 1
        body = {"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params}
        return self.client.post(self.url, json=body, headers=self.headers).json()

    def close(self) -> None:
        self.client.close()


@contextlib.contextmanager
def listening(argv: list[str], port: int) -> Iterator[None]:
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{argv[0]} did not start")
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(15)


def measure(calls: int, one: Callable[[int], Any]) -> tuple[float, float]:
    for i in range(min(50, calls)):  # warm-up (JIT, caches, connections)
        one(-1 - i)
    times = []
    for i in range(calls):
        began = time.perf_counter()
        answer = one(i)
        times.append(time.perf_counter() - began)
        assert "result" in answer, answer
    times.sort()
    return statistics.median(times) * 1e6, times[int(len(times) * 0.99) - 1] * 1e6


def rows(client: Any, calls: int, keyed: bool) -> dict[str, tuple[float, float]]:
    def call(key: str | None) -> Callable[[int], Any]:
        def one(i: int) -> Any:
            params: dict[str, Any] = {"name": "sep3182_record", "arguments": {"label": "b"}}
            if key is not None:
                params["idempotencyKey"] = f"{key}-{i}" if key == "first" else key
            return client.request("tools/call", params)

        return one

    out = {"unkeyed": measure(calls, call(None))}
    if keyed:
        out["keyed, first execution"] = measure(calls, call("first"))
        call("replay")(0)
        out["keyed, replay"] = measure(calls, call("replay"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--store", default="memory://")
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None or not (TS / "node_modules").is_dir():
        raise SystemExit("node and `npm ci` in tests/conformance/ts_server are needed")
    results: list[tuple[str, str, tuple[float, float]]] = []
    server = [node, str(TS / "server.mjs")]
    for name, argv, keyed in [
        ("direct", server, False),
        ("proxy", [*proxy("--store", args.store), "--", *server], True),
    ]:
        client = Stdio(argv)
        results += [
            ("stdio", f"{name}, {row}", v) for row, v in rows(client, args.calls, keyed).items()
        ]
        client.close()
    up, front = free_port(), free_port()
    options = ("--store", args.store, "--scope", "token-hash")
    listen = ("--upstream", f"http://127.0.0.1:{up}/mcp", "--listen", f"127.0.0.1:{front}")
    with listening([node, str(TS / "http_server.mjs"), str(up)], up):
        direct = Http(f"http://127.0.0.1:{up}/mcp")
        results += [("HTTP", f"direct, {r}", v) for r, v in rows(direct, args.calls, False).items()]
        direct.close()
        with listening([*proxy(*options, *listen)], front):
            through = Http(f"http://127.0.0.1:{front}/mcp")
            results += [
                ("HTTP", f"proxy, {r}", v) for r, v in rows(through, args.calls, True).items()
            ]
            through.close()
    base = {t: v[0] for t, row, v in results if row == "direct, unkeyed"}
    version = subprocess.check_output([node, "--version"]).decode().strip()
    print(f"{args.calls} sequential calls per row, store {args.store}, node {version}")
    print("| transport | row | p50 µs | p99 µs | p50 / direct unkeyed |")
    print("|---|---|---:|---:|---:|")
    for transport, row, (p50, p99) in results:
        print(f"| {transport} | {row} | {p50:.0f} | {p99:.0f} | {p50 / base[transport]:.2f}× |")


if __name__ == "__main__":
    main()
