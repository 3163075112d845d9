"""Walkthrough: three stateless HTTP instances of the payments server sharing one Redis.

    python examples/multi_instance.py                        # Redis at redis://127.0.0.1:6379/0
    python examples/multi_instance.py --redis redis://host:6379/2

Under the stateless protocol a load balancer may send each retry to a different instance, so
the idempotency records must live where every instance sees them. This script starts three
processes of examples/payments_server.py (`--http PORT --stateless`, IDEMTOOLS_STORE=<redis>),
plays a client whose answer from instance 1 is lost and who retries on instances 2 and 3, and
prints what happened. It speaks raw JSON-RPC over HTTP (httpx), so it runs on mcp 1.x and 2.x
alike. Exits non-zero if anything deviates from SEP-3182; the instances are always stopped.

The records it writes expire by themselves (the charge tool keeps them 24 hours); every run uses
fresh idempotency keys.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

SERVER = Path(__file__).with_name("payments_server.py")
TOKEN = "demo-alice"  # the payments server's demo bearer tokens: records are scoped per caller
START_TIMEOUT = 30.0
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"   {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Instance:
    """One payments server process on 127.0.0.1, spoken to with raw JSON-RPC POSTs."""

    def __init__(self, name: str, redis_url: str) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        env = {**os.environ, "IDEMTOOLS_STORE": redis_url, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--http", str(self.port), "--stateless"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.http = httpx.Client(timeout=15)
        self.ids = 0
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {TOKEN}",
        }

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        message = {"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}
        response = self.http.post(self.url, headers=self.headers, json=message)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            reply: dict[str, Any] = {}
            for line in response.text.splitlines():  # the last reply event carries the answer
                if line.startswith("data:") and line[5:].strip():
                    reply = json.loads(line[5:])
            return reply
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer

    def wait_ready(self) -> None:
        """Initialize (stateless: every POST stands alone) until it answers; bounded."""
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "multi-instance-walkthrough", "version": "0"},
        }
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RuntimeError(f"{self.name} exited at start-up:\n{err[-2000:]}")
            try:
                reply = self.rpc("initialize", hello)
                if "result" in reply:
                    tools = reply["result"]["capabilities"].get("tools", {})
                    if "idempotency" not in tools:
                        raise RuntimeError(f"{self.name} does not advertise idempotency")
                    self.headers["MCP-Protocol-Version"] = reply["result"]["protocolVersion"]
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer on {self.url} within {START_TIMEOUT}s")

    def call(self, name: str, arguments: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments}
        if key is not None:
            params["idempotencyKey"] = key
        return self.rpc("tools/call", params)

    def executions(self) -> int:
        """How many charges this process ran (its `ledger` tool, called without a key)."""
        reply = self.call("ledger", {})
        return int(reply["result"]["structuredContent"]["charges"])

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stderr:
            self.proc.stderr.close()


def text(reply: dict[str, Any]) -> str:
    if "error" in reply:
        data = reply["error"].get("data") or {}
        return f"error {data.get('type', reply['error'].get('code'))}: {reply['error']['message']}"
    return " ".join(b.get("text", "") for b in reply.get("result", {}).get("content", []))


def error_type(reply: dict[str, Any]) -> str | None:
    data = reply.get("error", {}).get("data")
    return data.get("type") if isinstance(data, dict) else None


def redis_answers(url: str) -> str | None:
    try:
        import redis
    except ImportError:
        return "the redis package is missing: pip install -e '.[redis]' (from the checkout)"
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        return f"{url} does not answer ({exc})"
    finally:
        client.close()
    return None


def walkthrough(one: Instance, two: Instance, three: Instance) -> None:
    fleet = (one, two, three)
    key = f"walkthrough-{uuid.uuid4()}"
    before = [i.executions() for i in fleet]
    print(f"\n1. charge 42 usd with idempotencyKey {key!r} on instance 1; the answer is lost")
    lost = one.call("charge", {"amount": 42}, key)
    print(f"   (instance 1 answered {text(lost)!r}; the client never saw it)")

    print("\n2. the client retries the same call; the load balancer picks instance 2, then 3")
    second = two.call("charge", {"amount": 42}, key)
    third = three.call("charge", {"amount": 42}, key)
    print(f"   instance 2: {text(second)}")
    print(f"   instance 3: {text(third)}")
    check("result" in second and second["result"].get("isError") is False, "the retry succeeds")
    check(
        second.get("result") == third.get("result") == lost.get("result"),
        "identical replays: instances 2 and 3 return the result object instance 1 produced",
    )
    ran = [after - b for b, after in zip(before, (i.executions() for i in fleet), strict=True)]
    print(f"   executions per instance (each one's ledger): {ran}")
    check(ran == [1, 0, 0], "one execution in the whole fleet, on instance 1")

    print("\n3. the same key with different arguments, on instance 3")
    other = three.call("charge", {"amount": 43}, key)
    print(f"   instance 3: {text(other)}")
    check(error_type(other) == "idempotency_key_conflict", "conflict: the key is already spent")

    print("\n4. a fresh key on instance 2 is a new charge")
    fresh = two.call("charge", {"amount": 5}, f"walkthrough-{uuid.uuid4()}")
    print(f"   instance 2: {text(fresh)}")
    ran = [after - b for b, after in zip(before, (i.executions() for i in fleet), strict=True)]
    check("result" in fresh and ran == [1, 1, 0], "it runs once, on instance 2")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0", help="shared Redis URL")
    args = parser.parse_args(argv)
    problem = redis_answers(args.redis)
    if problem:
        print(f"needs a running Redis: {problem}", file=sys.stderr)
        return 2

    instances: list[Instance] = []
    try:
        for n in (1, 2, 3):
            instances.append(Instance(f"instance {n}", args.redis))
        for instance in instances:
            instance.wait_ready()
        print(f"three stateless instances sharing {args.redis}:")
        for instance in instances:
            print(f"   {instance.name}: {instance.url} (pid {instance.proc.pid})")
        walkthrough(*instances)
    except (RuntimeError, httpx.HTTPError, KeyError) as exc:
        failures.append(f"{type(exc).__name__}: {exc}")
        print(f"\nFAIL {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        for instance in instances:
            instance.stop()
    if failures:
        print(f"\n{len(failures)} check(s) failed: {failures}")
        return 1
    print("\nall checks passed: one execution, identical replays, conflicts seen fleet-wide")
    return 0


if __name__ == "__main__":
    sys.exit(main())
