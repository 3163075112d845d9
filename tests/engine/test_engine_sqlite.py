"""The engine over a real SQLiteStore: one execution per key, under concurrency and restarts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.policy import Policy, Registry
from idemtools.scopes import CallContext, shared
from idemtools.stores.sqlite import SQLiteStore

POLICY = Policy(retention=600.0, lease=30.0, scope=shared)
RESULT = {"content": [{"type": "text", "text": "charged 42 € 🧾"}], "isError": False}


def call(key: str = "pay-1", arguments: dict[str, object] | None = None) -> ToolCall:
    return ToolCall(
        name="pay",
        arguments={"amount": 42} if arguments is None else arguments,
        key=key,
        context=CallContext(transport="memory"),
        policy=POLICY,
    )


def engine_for(store: SQLiteStore) -> Engine:
    return Engine(store, registry=Registry(), default_policy=POLICY)


class Tool:
    """A tool that counts its executions and takes a while, so calls overlap."""

    def __init__(self, delay: float = 0.2) -> None:
        self.runs = 0
        self.delay = delay

    async def __call__(self) -> Outcome:
        self.runs += 1
        await anyio.sleep(self.delay)
        return Outcome(result=RESULT)


def error_type(outcome: Outcome) -> str | None:
    if outcome.error is None:
        return None
    data = outcome.error.get("data")
    return data.get("type") if isinstance(data, dict) else None


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "idem.db")
    yield store
    await store.aclose()


async def test_200_concurrent_calls_run_once(store: SQLiteStore) -> None:
    engine = engine_for(store)
    tool = Tool()
    outcomes = await asyncio.gather(*(engine.handle(call(), tool) for _ in range(200)))
    assert tool.runs == 1
    assert engine.stats.executions == 1
    originals = [o for o in outcomes if o.result is not None and not o.replayed]
    replays = [o for o in outcomes if o.result is not None and o.replayed]
    waiting = [o for o in outcomes if error_type(o) == "idempotency_key_in_progress"]
    assert len(originals) == 1
    assert len(originals) + len(replays) + len(waiting) == 200  # nothing else came back
    assert waiting, "the tool was still running: some calls must have been told to wait"
    assert all(o.result == RESULT for o in originals + replays)
    for o in waiting:
        assert o.error is not None
        retry_after = o.error["data"]["retryAfterMs"]
        assert isinstance(retry_after, int) and retry_after > 0
    # Afterwards every retry is the replay, byte-for-byte the original result.
    later = await asyncio.gather(*(engine.handle(call(), tool) for _ in range(20)))
    assert tool.runs == 1
    assert all(o.replayed and o.result == RESULT for o in later)


async def test_two_engines_sharing_one_file_run_once(tmp_path: Path) -> None:
    # Two server workers on one host, each with its own store on the same file.
    stores = [SQLiteStore(tmp_path / "idem.db"), SQLiteStore(tmp_path / "idem.db")]
    try:
        engines = [engine_for(s) for s in stores]
        tool = Tool(delay=0.1)
        outcomes = await asyncio.gather(*(engines[i % 2].handle(call(), tool) for i in range(100)))
        assert tool.runs == 1
        assert sum(o.result is not None and not o.replayed for o in outcomes) == 1
        unexpected = [
            o
            for o in outcomes
            if not (o.result == RESULT or error_type(o) == "idempotency_key_in_progress")
        ]
        assert unexpected == []
    finally:
        for s in stores:
            await s.aclose()


async def test_replay_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "idem.db"
    tool = Tool(delay=0)
    first = SQLiteStore(path)
    try:
        original = await engine_for(first).handle(call(), tool)
    finally:
        await first.aclose()
    assert original.result == RESULT and tool.runs == 1

    second = SQLiteStore(path)  # the server restarted
    try:
        engine = engine_for(second)
        replay = await engine.handle(call(), tool)
        conflict = await engine.handle(call(arguments={"amount": 43}), tool)
    finally:
        await second.aclose()
    assert tool.runs == 1
    assert replay.replayed and replay == original
    assert error_type(conflict) == "idempotency_key_conflict"


async def test_store_unavailable_refuses_without_running(tmp_path: Path) -> None:
    path = tmp_path / "idem.db"
    path.write_bytes(b"garbage, not a database" * 100)
    store = SQLiteStore(path)
    try:
        engine = engine_for(store)
        tool = Tool(delay=0)
        outcome = await engine.handle(call(), tool)
    finally:
        await store.aclose()
    assert tool.runs == 0
    assert error_type(outcome) == "idempotency_store_unavailable"
