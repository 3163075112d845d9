"""Soak: two server processes, one Redis restarted mid-run, cancellations and blocking tools.

Bounded (200 keys, under a minute): two `tests/e2e/soak_server.py` processes share a private
redis-server (AOF on, `appendfsync always`, started on a free port and stopped by the test). The
client sends each key to a random instance; 30% of first attempts are cut off by the client
(a short timeout: the connection drops mid-call), 20% of the tools block their event loop for
1.13 leases, and halfway through Redis is stopped and started again on the same data. Every key
is then retried (on random instances) until it has a final answer.

A claim survives a store outage only while its lease lasts: the soak server's lease (1.5 s)
is longer than a local Redis restart plus one renewal interval (lease / 3), as an operator's
lease must be longer than their store's failover time (docs/operations.md, Leases).

What must hold afterwards: every key executed at most once across the fleet (the servers' own
ledger file), every key replays its answer, and no key is left "in progress".
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.services import services_required

from .harness import LEGACY, HttpWire, error_type, result_text

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
KEYS = 200
CONCURRENCY = 20
BLOCK = 1.7  # seconds: past the soak server's lease (1.5 s), so only renewal keeps the claim
RETRY_LIMIT = 200  # attempts per key, each bounded by its timeout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        message = "redis-server is not installed (the soak test starts a private one)"
        if services_required():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


class PrivateRedis:
    """A redis-server of the test's own, AOF on, so a restart keeps every acknowledged write."""

    def __init__(self, directory: Path) -> None:
        self.binary = _redis_server()
        self.dir = directory
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.dir),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--save", "",
                "--maxmemory-policy", "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError("private redis-server did not start")

    def restart(self) -> None:
        """Stop (SIGTERM: the AOF is complete) and start again on the same port and data."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)
        self.proc = None


@contextlib.contextmanager
def _fleet(redis_url: str, ledger: Path, logs: Path) -> Iterator[list[str]]:
    env = {**os.environ, "IDEMTOOLS_STORE": redis_url, "PYTHONUNBUFFERED": "1"}
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for i in range(2):
            port = _free_port()
            log = (logs / f"server{i}.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.e2e.soak_server", str(port), str(ledger)],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            urls.append(f"http://127.0.0.1:{port}/mcp")
        for url in urls:
            _wait_ready(url)
        yield urls
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                reply = client.post(
                    url,
                    headers={"Accept": "application/json, text/event-stream"},
                    json={"jsonrpc": "2.0", "id": 0, "method": "ping"},
                )
                if reply.status_code < 500:
                    return
            time.sleep(0.1)
    raise RuntimeError(f"soak server {url} did not start")


def _params(label: str, block: float) -> dict[str, Any]:
    return {"name": "work", "arguments": {"label": label, "block": block}, "idempotencyKey": label}


async def _call(url: str, params: dict[str, Any], limit: float) -> dict[str, Any] | None:
    """One stateless call; None when the client gave up (its timeout cut the connection)."""
    async with httpx.AsyncClient(timeout=limit) as client:
        wire = HttpWire(client, url, LEGACY, None)
        try:
            return await wire.call(params)
        except httpx.HTTPError:
            return None


async def test_soak_two_instances_redis_restart_cancellations_blocking_tools(
    tmp_path: Path,
) -> None:
    rng = random.Random(3182)
    redis_dir = tmp_path / "redis"
    redis_dir.mkdir()
    redis = PrivateRedis(redis_dir)
    redis.start()
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    plan = {f"soak-{i}": (BLOCK if rng.random() < 0.2 else 0.0) for i in range(KEYS)}
    cancel_first = {label for label in plan if rng.random() < 0.3}
    answers: dict[str, str] = {}
    try:
        with _fleet(f"redis://127.0.0.1:{redis.port}/0", ledger, tmp_path) as urls:
            limiter = anyio.CapacityLimiter(CONCURRENCY)
            started = 0
            restarted = anyio.Event()

            async def one(label: str) -> None:
                nonlocal started
                async with limiter:
                    started += 1
                    params = _params(label, plan[label])
                    if label in cancel_first:
                        await _call(rng.choice(urls), params, limit=0.2)
                    for _ in range(RETRY_LIMIT):
                        reply = await _call(rng.choice(urls), params, limit=10)
                        kind = None if reply is None else error_type(reply)
                        if reply is not None and kind is None and "result" in reply:
                            answers[label] = result_text(reply)
                            return
                        assert kind in (None, "idempotency_key_in_progress",
                                        "idempotency_store_unavailable"), reply  # fmt: skip
                        await anyio.sleep(0.1)
                    raise AssertionError(f"{label} never got a final answer")

            async def restart_midway() -> None:
                while started < KEYS // 2:
                    await anyio.sleep(0.05)
                await anyio.to_thread.run_sync(redis.restart)
                restarted.set()

            with anyio.fail_after(150):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(restart_midway)
                    for label in plan:
                        tg.start_soon(one, label)
            assert restarted.is_set()

            executions = Counter(ledger.read_text().split())
            twice = {label: n for label, n in executions.items() if n > 1}
            assert twice == {}, f"executed more than once: {twice}"
            assert set(answers) == set(plan)
            assert all(answers[label] == f"done {label}" for label in plan)
            # Afterwards: every key replays (never runs again), none is left in progress.
            for label in plan:
                reply = await _call(rng.choice(urls), _params(label, plan[label]), limit=10)
                assert reply is not None and error_type(reply) is None, (label, reply)
                assert result_text(reply) == f"done {label}"
            assert Counter(ledger.read_text().split()) == executions
            # And no claim was ever lost or outcome dropped on the way (the servers' own logs).
            for log in (tmp_path / "server0.log", tmp_path / "server1.log"):
                text = log.read_text(errors="replace")
                for sign in ("lease lost", "outcome not recorded", "could not record outcome"):
                    assert sign not in text, f"{log.name}: {sign}"
    finally:
        redis.stop()
