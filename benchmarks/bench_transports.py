"""tools/call round trips over stdio and streamable HTTP: what idemtools costs per call there.

    python benchmarks/bench_transports.py                     # stdio and HTTP, memory://
    python benchmarks/bench_transports.py --calls 2000 --store redis
    python benchmarks/bench_transports.py --transports http --stateless

Per transport, two server processes with the same `add` tool as benchmarks/bench_mcp.py: a
bare one without idemtools, and one with idemtools installed on the store `--store` names. Over
stdio each is a subprocess on pipes (`server.run()`); over HTTP each is its streamable HTTP app
under uvicorn on 127.0.0.1, a free port, one keep-alive connection (stateful with SSE replies,
the SDK's default; `--stateless`: stateless with JSON replies). The client speaks raw JSON-RPC
(no SDK, one call in flight), so the figures are the servers' own.

Four kinds of call per transport, all interleaved in a freshly shuffled order every round,
`--calls` rounds: on the idemtools server a keyed first execution (a new key), a replay (one
key) and an unkeyed call, and three bare calls, so that both servers of a transport are called
equally often (one called less often is woken colder, which flatters the other). Prints
medians of the round trip and of the server process's CPU time per call (Linux scheduler
statistics; steadier on a loaded machine), each with its ratio to the same transport's bare
call. `--control` adds a second bare server per transport, called as often as the first: its
ratio to the first is the noise between two processes of the same code in this run.

`--store`: `memory` (default), `sqlite` (a file per server in a temporary directory), `redis`
or `postgres` (IDEMTOOLS_REDIS_URL / IDEMTOOLS_POSTGRES_URL, else 127.0.0.1; a per-run key
prefix or table, removed at the end), or any store URL (used as given). The servers inherit the
environment (`PGOPTIONS="-c synchronous_commit=off"`: PostgreSQL commits without waiting for
the disk). Over stdio the server keeps the default scope (the local user); over HTTP there is
no token, so it uses `shared`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LEGACY = "2025-11-25"
RUN = uuid.uuid4().hex[:8]
MAX_LINES = 100  # a reply is found among this many lines, or the server is broken


# -- the servers (`--serve`, in a subprocess) -----------------------------------------------------


def build(store_url: str | None, transport: str, stateless: bool) -> Any:
    """The bench server; idemtools installed on `store_url` unless it is None (bare)."""
    from idemtools.server.adapters import SDK2

    if SDK2:
        from mcp.server.mcpserver import MCPServer

        server: Any = MCPServer("bench", log_level="WARNING")
    else:
        from mcp.server.fastmcp import FastMCP

        server = FastMCP(
            "bench", log_level="WARNING", stateless_http=stateless, json_response=stateless
        )

    async def add(a: int, b: int) -> int:
        return a + b

    server.tool()(add)
    if store_url is not None:
        import idemtools
        from idemtools.stores import from_url

        options: dict[str, Any] = {}
        if transport == "http":  # no token, so no subject: every caller shares one scope
            options["default_policy"] = idemtools.Policy(scope=idemtools.shared)
        idemtools.install(server, store=from_url(store_url), **options)
    return server


def serve(transport: str, store_url: str | None, port: int, stateless: bool) -> None:
    server = build(store_url, transport, stateless)
    if transport == "stdio":
        server.run()
        return
    import uvicorn

    from idemtools.server.adapters import SDK2

    if SDK2:
        app = server.streamable_http_app(stateless_http=stateless, json_response=stateless)
    else:
        app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


# -- the client side ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def cpu_ns(pid: int) -> int:
    """CPU time the process has run so far (all its threads), in ns; 0 off Linux."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                total += int((task / "schedstat").read_text().split()[0])
    return total


def initialize_params() -> dict[str, Any]:
    from idemtools.server.adapters import SDK2

    if SDK2:
        version = LEGACY
    else:
        from mcp import types

        version = types.LATEST_PROTOCOL_VERSION
    return {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    }


class Server:
    """One server process and a raw JSON-RPC connection to it."""

    def __init__(self, transport: str, store_url: str | None, stateless: bool) -> None:
        self.transport, self.rid = transport, 0
        self.port = free_port() if transport == "http" else 0
        argv = [sys.executable, __file__, "--serve", transport, "--port", str(self.port)]
        argv += ["--serve-store", store_url or "bare"] + (["--stateless"] if stateless else [])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if transport == "stdio" else subprocess.DEVNULL,
            stdout=subprocess.PIPE if transport == "stdio" else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
        )
        self.cpu_mark, self.last_kind = 0, ""
        self.cpu: dict[str, list[int]] = {}
        if transport == "http":
            import httpx

            self.wait_listening()
            self.url = f"http://127.0.0.1:{self.port}/mcp"
            self.http = httpx.Client(timeout=30)
            self.headers = {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            }
        initialized = self.request("initialize", initialize_params())
        assert "result" in initialized, initialized
        self.notify("notifications/initialized")

    def wait_listening(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), 0.2),
            ):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise SystemExit(f"the HTTP server on port {self.port} did not start")

    def send(self, message: dict[str, Any]) -> Any:
        if self.transport == "http":
            response = self.http.post(self.url, json=message, headers=self.headers)
            if "mcp-session-id" in response.headers:
                self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
                self.headers["mcp-protocol-version"] = initialize_params()["protocolVersion"]
            return response
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return None

    def notify(self, method: str) -> None:
        self.send({"jsonrpc": "2.0", "method": method})

    def request(self, method: str, params: dict[str, Any]) -> Any:
        self.rid += 1
        response = self.send({"jsonrpc": "2.0", "id": self.rid, "method": method, "params": params})
        if response is not None:  # HTTP: a JSON body, or an SSE stream that ends with the reply
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return response.json()
            lines = response.text.splitlines()
        else:
            assert self.proc.stdout is not None
            lines = (self.proc.stdout.readline().decode() for _ in range(MAX_LINES))
        for line in lines:
            line = line.removeprefix("data:").strip()
            if not line.startswith("{"):
                continue
            message = json.loads(line)
            if message.get("id") == self.rid:
                return message
        raise SystemExit(f"no reply to request {self.rid} from the {self.transport} server")

    def call(self, kind: str, key: str | None) -> float:
        """One `tools/call`, timed; the server's CPU since the previous call goes to that call's
        kind (so work it does after answering is counted too)."""
        now = cpu_ns(self.proc.pid)
        if self.last_kind:
            self.cpu.setdefault(self.last_kind, []).append(now - self.cpu_mark)
        self.cpu_mark, self.last_kind = now, kind
        params: dict[str, Any] = {"name": "add", "arguments": {"a": 1, "b": 2}}
        if key is not None:
            params["idempotencyKey"] = key
        began = time.perf_counter()
        answer = self.request("tools/call", params)
        elapsed = time.perf_counter() - began
        result = answer.get("result")
        assert result is not None and not result.get("isError"), answer
        return elapsed

    def close(self) -> None:
        if self.transport == "http":
            self.http.close()
            self.proc.terminate()
        else:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(20)


# -- stores ---------------------------------------------------------------------------------------


def with_query(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


@contextlib.contextmanager
def store_urls(store: str, transports: list[str]) -> Iterator[dict[str, str]]:
    """A store URL per transport's idemtools server; whatever a shorthand made is removed after."""
    if store == "memory":
        yield dict.fromkeys(transports, "memory://")
    elif store == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            yield {t: f"sqlite:///{tmp}/{t}.db" for t in transports}
    elif store == "redis":
        import redis

        url = os.environ.get("IDEMTOOLS_REDIS_URL") or "redis://127.0.0.1:6379/0"
        prefix = f"idemtools-bench-{RUN}:"
        try:
            yield dict.fromkeys(transports, with_query(url, f"prefix={prefix}"))
        finally:
            client = redis.Redis.from_url(url)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                client.delete(key)
            client.close()
    elif store == "postgres":
        import asyncio

        from idemtools.stores.postgres import PostgresStore

        url = os.environ.get("IDEMTOOLS_POSTGRES_URL") or "postgresql://postgres@127.0.0.1/test"
        table = f"idemtools_bench_{RUN}"

        async def schema(create: bool) -> None:
            pg = PostgresStore.from_url(url, table=table)
            try:
                await (pg.create_schema() if create else pg.drop_schema())
            finally:
                await pg.aclose()

        asyncio.run(schema(True))
        try:
            yield dict.fromkeys(transports, with_query(url, f"table={table}"))
        finally:
            asyncio.run(schema(False))
    else:
        yield dict.fromkeys(transports, store)


# -- the run --------------------------------------------------------------------------------------


ROLE = {"bare": "bare", "control": "control", "first": "idem", "replay": "idem", "unkeyed": "idem"}
"""Which of a transport's servers each kind of call goes to."""


def run(calls: int, store: str, transports: list[str], stateless: bool, control: bool) -> None:
    kinds = ["bare", *(["control"] if control else []), "first", "replay", "unkeyed"]
    with store_urls(store, transports) as urls:
        servers: dict[str, dict[str, Server]] = {}
        try:
            for t in transports:
                servers[t] = {"bare": Server(t, None, stateless)}
                if control:
                    servers[t]["control"] = Server(t, None, stateless)
                servers[t]["idem"] = Server(t, urls[t], stateless)
            samples = measure(servers, kinds, calls)
        finally:
            for started in servers.values():
                for server in started.values():
                    server.close()
    shown = urls[transports[0]] if store not in ("memory", "sqlite", "redis", "postgres") else store
    print(
        f"mcp {importlib.metadata.version('mcp')}, Python {sys.version.split()[0]}, "
        f"store {shown}, {calls} calls of each kind per transport (medians), "
        f"HTTP {'stateless, JSON' if stateless else 'stateful, SSE'}"
    )
    print("| transport | call | round trip µs | × bare | server CPU µs | × bare |")
    print("|---|---|---:|---:|---:|---:|")
    for transport, started in servers.items():
        cpu = {kind: v for server in started.values() for kind, v in server.cpu.items()}
        base = statistics.median(samples[transport]["bare"])
        base_cpu = statistics.median(cpu["bare"]) if cpu.get("bare") else 0
        for kind in kinds:
            median = statistics.median(samples[transport][kind])
            spent = statistics.median(cpu[kind]) if cpu.get(kind) else 0
            cpu_ratio = f"{spent / base_cpu:.2f}" if base_cpu else ""
            print(
                f"| {transport} | {kind} | {median * 1e6:.0f} | {median / base:.2f} "
                f"| {spent / 1e3:.0f} | {cpu_ratio} |"
            )


def measure(
    servers: dict[str, dict[str, Server]], kinds: list[str], calls: int
) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {t: {k: [] for k in kinds} for t in servers}
    for started in servers.values():
        started["idem"].call("replay", f"replay-{RUN}")  # the record every replay finds
        for i in range(min(50, calls)):  # warm every path
            for kind in kinds:
                key = {"first": f"warm-{RUN}-{i}", "replay": f"replay-{RUN}"}.get(kind)
                started[ROLE[kind]].call(kind, key)
        for server in started.values():
            server.cpu.clear()
            server.last_kind = ""
    # Every server of a transport is called equally often in every round (the bare ones three
    # times): a process called less often is woken colder (its caches, the scheduler), which
    # would flatter the others.
    per_round = [k for k in kinds if ROLE[k] != "idem"] * 3 + [
        k for k in kinds if ROLE[k] == "idem"
    ]
    rounds = [(t, k) for t in servers for k in per_round]
    for _ in range(calls):
        random.shuffle(rounds)
        for transport, kind in rounds:
            key = {"first": uuid.uuid4().hex, "replay": f"replay-{RUN}"}.get(kind)
            samples[transport][kind].append(servers[transport][ROLE[kind]].call(kind, key))
    for started in servers.values():  # the last call's CPU
        for server in started.values():
            if server.last_kind:
                spent = cpu_ns(server.proc.pid) - server.cpu_mark
                server.cpu.setdefault(server.last_kind, []).append(spent)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="rounds (calls of each kind)")
    parser.add_argument(
        "--store", default="memory", help="memory, sqlite, redis, postgres or a URL"
    )
    parser.add_argument("--transports", default="stdio,http", help="stdio, http or both")
    parser.add_argument("--stateless", action="store_true", help="HTTP: stateless, JSON replies")
    parser.add_argument(
        "--control", action="store_true", help="a second bare server per transport: the noise"
    )
    parser.add_argument("--serve", choices=["stdio", "http"], help=argparse.SUPPRESS)
    parser.add_argument("--serve-store", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        store = None if args.serve_store == "bare" else args.serve_store
        serve(args.serve, store, args.port, args.stateless)
        return
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    if not transports or not set(transports) <= {"stdio", "http"}:
        parser.error("--transports: stdio, http or stdio,http")
    if args.calls < 1:
        parser.error("--calls: at least 1")
    run(args.calls, args.store, transports, args.stateless, args.control)


if __name__ == "__main__":
    main()
