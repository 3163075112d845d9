"""`idemtools proxy` against a trivial TypeScript tool: direct vs through the proxy, side by side.

    python benchmarks/bench_proxy.py [--calls N] [--store URL] [--before TREE] [--stdio-only]
    valgrind --tool=callgrind python benchmarks/bench_proxy.py --replay-loop N

Rows, each as p50 / p99 latency of sequential calls (one client, one in flight), stdio and
HTTP: unkeyed calls direct and through the proxy; keyed first executions (a new key each call)
and replays (one key) through the proxy; the ratios to direct. The tool is the fixture server's
`sep3182_record` on @modelcontextprotocol/sdk (tests/conformance/ts_server; `npm ci` there
first). Clients speak raw JSON-RPC (no SDK), so the figures are the servers' and the proxy's.

`--before TREE`: also run the proxy from another source tree (a directory holding an `idemtools`
package, e.g. `git archive REV idemtools | tar -x -C TREE`), in the same run, rows interleaved
with this tree's, so that a change to the relay is measured before and after side by side.

`--replay-loop N`: N replays through the stdio relay's own code in this process (no pipes, no
node), for an instruction count: run it under callgrind at N and at 0, and divide the
difference by N.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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


FLOOR = """
import os, selectors, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
routes = {0: child.stdin.fileno(), child.stdout.fileno(): 1}
sel = selectors.DefaultSelector()
for fd in routes:
    sel.register(fd, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        data = os.read(key.fd, 1 << 16)
        if not data:
            sys.exit(0)
        os.write(routes[key.fd], data)
"""
"""The floor of any relay process: bytes copied both ways by a blocking select loop, no parsing,
no asyncio. What it adds over direct is the pipe hop itself (two more pipes, a third process
woken twice per call)."""


def tree_env(tree: str | None) -> dict[str, str] | None:
    """The environment that makes `python -m idemtools.cli` import idemtools from `tree`."""
    if tree is None:
        return None
    return {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}


class Stdio:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        cwd = ROOT if env is None else Path(env["PYTHONPATH"])
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd, env=env
        )
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


def cpu_ns(pid: int) -> int:
    """CPU time the process has run so far, in ns, from the scheduler (Linux; 0 elsewhere):
    steadier than wall-clock latency on a loaded machine, and not bounded by the pipe hop."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((task / "schedstat").read_text().split()[0])
    return total


CPU: dict[str, float] = {}
"""Row → CPU µs per call of the process the client talks to (node for direct, else the relay)."""


def interleaved(
    clients: list[tuple[str, Any, bool]], calls: int, rounds: int
) -> list[tuple[str, tuple[float, float]]]:
    """Every row of every client, measured in `rounds` slices taken in turn, so that the load
    of a shared machine drifting during the run falls on all of them alike."""
    kinds: list[tuple[str, str | None]] = [
        ("unkeyed", None),
        ("keyed, first execution", "first"),
        ("keyed, replay", "replay"),
    ]
    times: dict[tuple[str, str], list[float]] = {}
    for _, client, keyed in clients:
        params = {"name": "sep3182_record", "arguments": {"label": "b"}}
        for i in range(50):  # warm-up (JIT, caches)
            client.request("tools/call", params)
            if keyed:
                client.request("tools/call", {**params, "idempotencyKey": f"warm-{i}"})
                client.request("tools/call", {**params, "idempotencyKey": "replay"})
    serial = iter(range(1 << 40))
    for _slice in range(rounds):
        for kind, key in kinds:
            for name, client, keyed in clients:
                if key is not None and not keyed:
                    continue
                spent = times.setdefault((name, kind), [])
                cpu_before = cpu_ns(client.proc.pid)
                for _ in range(calls // rounds):
                    params = {"name": "sep3182_record", "arguments": {"label": "b"}}
                    if key is not None:
                        params["idempotencyKey"] = (
                            f"first-{next(serial)}" if key == "first" else key
                        )
                    began = time.perf_counter()
                    answer = client.request("tools/call", params)
                    spent.append(time.perf_counter() - began)
                    assert "result" in answer, answer
                row = f"{name}, {kind}"
                used = (cpu_ns(client.proc.pid) - cpu_before) / 1e3 / (calls // rounds)
                CPU[row] = CPU.get(row, 0.0) + used / rounds
    out = []
    for (name, kind), spent in times.items():
        spent.sort()
        p99 = spent[int(len(spent) * 0.99) - 1]
        out.append((f"{name}, {kind}", (statistics.median(spent) * 1e6, p99 * 1e6)))
    order = {name: i for i, (name, _, _) in enumerate(clients)}
    rank = {kind: i for i, (kind, _) in enumerate(kinds)}
    out.sort(key=lambda r: (order[r[0].split(", ", 1)[0]], rank[r[0].split(", ", 1)[1]]))
    return out


REPLAY_LINE = (
    b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"record",'
    b'"arguments":{"label":"a"},"idempotencyKey":"k1"}}\n'
)


def replay_loop(n: int) -> None:
    """`n` replays through the stdio relay's own path, in this process, one loop turn each: the
    proxy's CPU for a replay without pipes or scheduling, for callgrind (instructions are
    stable on a loaded machine). Per replay = (instructions at N - at 0) / N."""
    import asyncio

    from idemtools.proxy.config import parse
    from idemtools.proxy.stdio import StdioProxy

    class Host:
        def __init__(self) -> None:
            self.lines: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.lines.append(data)

        def is_closing(self) -> bool:
            return False

    class Upstream:
        async def request(self, method: str, params: Any, *, timeout: Any) -> dict[str, Any]:
            text = json.dumps({"label": "a", "executions": 1})
            result = {"content": [{"type": "text", "text": text}], "isError": False}
            return {"jsonrpc": "2.0", "id": "x", "result": result}

    async def run() -> None:
        relay = StdioProxy(["true"], parse({}))
        relay.loop = asyncio.get_running_loop()
        host = relay.writer = Host()
        relay.upstream = Upstream()  # type: ignore[assignment]
        relay.from_client(REPLAY_LINE % 1)  # the first execution
        await asyncio.sleep(0.01)
        lines = [REPLAY_LINE % (i + 2) for i in range(n)]
        for line in lines:
            relay.from_client(line)
            await asyncio.sleep(0)
        assert len(host.lines) == n + 1 and b'"id":1,' in host.lines[0], host.lines[:2]
        await relay.engine.aclose()

    asyncio.run(run())


def main() -> None:
    if sys.argv[1:2] == ["--replay-loop"]:
        replay_loop(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--store", default="memory://")
    parser.add_argument("--before", metavar="TREE", help="also run the proxy of this source tree")
    parser.add_argument("--rounds", type=int, default=10, help="stdio: interleaved slices")
    parser.add_argument("--stdio-only", action="store_true", help="skip the HTTP rows")
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None or not (TS / "node_modules").is_dir():
        raise SystemExit("node and `npm ci` in tests/conformance/ts_server are needed")
    results: list[tuple[str, str, tuple[float, float]]] = []
    server = [node, str(TS / "server.mjs")]
    trees: list[tuple[str, str | None]] = [("proxy", None)]
    if args.before is not None:
        trees.insert(0, ("proxy before", args.before))
    stdio = [
        (name, Stdio(argv, env), keyed)
        for name, argv, keyed, env in [
            ("direct", server, False, None),
            ("bare relay (floor)", [PY, "-c", FLOOR, *server], False, None),
            *[
                (n, [*proxy("--store", args.store), "--", *server], True, tree_env(t))
                for n, t in trees
            ],
        ]
    ]
    results += [("stdio", row, v) for row, v in interleaved(stdio, args.calls, args.rounds)]
    for _, client, _ in stdio:
        client.close()
    if args.stdio_only:
        report(results, args, node)
        return
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
    report(results, args, node)


def report(results: list[tuple[str, str, tuple[float, float]]], args: Any, node: str) -> None:
    base = {t: v[0] for t, row, v in results if row == "direct, unkeyed"}
    version = subprocess.check_output([node, "--version"]).decode().strip()
    print(f"{args.calls} sequential calls per row, store {args.store}, node {version}")
    print("| transport | row | p50 µs | p99 µs | p50 / direct unkeyed | CPU µs / call |")
    print("|---|---|---:|---:|---:|---:|")
    for transport, row, (p50, p99) in results:
        cpu = f"{CPU[row]:.0f}" if transport == "stdio" and row in CPU else ""
        ratio = p50 / base[transport]
        print(f"| {transport} | {row} | {p50:.0f} | {p99:.0f} | {ratio:.2f}× | {cpu} |")


if __name__ == "__main__":
    main()
