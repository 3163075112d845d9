"""`max_runtime` across two processes sharing Redis: the tool never runs a second time.

Process A runs a keyed call whose tool passes its `max_runtime` (0.6 s, lease 0.3 s) and goes
on. Process B (this test's own engine, on the same Redis) retries: it is answered
`idempotency_outcome_unknown`, and the tool is not entered again. When A's tool ends, its real
outcome replaces the unknown record (same owner), and B's next retry replays it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall

from ..services import RUN_ID, delete_redis_keys, need_redis

pytestmark = [pytest.mark.slow, pytest.mark.services]

ROOT = Path(__file__).resolve().parents[2]


def policy() -> Policy:
    return Policy.of(retention=60, lease=0.3, scope=shared, max_runtime=0.6)


def test_past_max_runtime_another_process_gets_unknown_then_the_real_outcome(
    tmp_path: Path,
) -> None:
    prefix = f"idemtools-test:{RUN_ID}:maxrt2:{uuid.uuid4().hex[:6]}:"
    url = f"{need_redis()}?prefix={prefix}"
    ledger, go, key = tmp_path / "ledger", tmp_path / "go", "k-export"
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.e2e.max_runtime_worker", url, str(ledger), str(go), key],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    ran_here: list[int] = []

    async def tool() -> Outcome:
        ran_here.append(1)
        return Outcome.of_value("second run")

    async def retry() -> Outcome:
        from idemtools.stores import from_url

        engine = Engine(from_url(url), registry=Registry())
        try:
            call = ToolCall(name="export", arguments={}, key=key, policy=policy())
            return await engine.handle(call, tool)
        finally:
            await engine.aclose()

    try:
        deadline = time.monotonic() + 20
        while not ledger.exists():
            assert time.monotonic() < deadline and worker.poll() is None, "worker never ran"
            time.sleep(0.02)
        entered = time.monotonic()
        time.sleep(0.6 + 0.3 * 3)  # past max_runtime, and past one lease after it
        during = anyio.run(retry)
        assert worker.poll() is None, "the first run should still be going"
        go.touch()
        out, _ = worker.communicate(timeout=20)
        after = anyio.run(retry)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        delete_redis_keys(prefix)
    first = json.loads(out)
    assert during.error is not None, during
    assert during.error["data"]["type"] == "idempotency_outcome_unknown", during
    assert first["result"] is not None, first  # the first caller still gets its real answer
    assert after.result == first["result"] and after.replayed, (after, first)
    assert not ran_here and len(ledger.read_text().split()) == 1
    assert time.monotonic() - entered > 0.6
