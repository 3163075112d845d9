"""Byte budgets that bound, through the engine, on every store that has one.

150 keyed calls run at once, each answering 1 MB, against a 16 MiB budget: what the store
keeps never exceeds the budget (before: 143 MiB), and every one of the 150 retries either
replays or is refused with `idempotency_outcome_not_kept`; none runs the tool again.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome, is_tombstone
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores import MemoryStore, SQLiteStore
from idemtools.stores.base import Store

BUDGET = 16 << 20
CALLS = 150
TEXT = "x" * 1_000_000


async def _memory(_: Path) -> Store:
    return MemoryStore(max_bytes=BUDGET, max_bytes_per_scope=None)  # the total budget alone


async def _sqlite(tmp: Path) -> Store:
    return SQLiteStore(tmp / "idem.db", max_bytes=BUDGET, max_bytes_per_scope=None)


async def _postgres(_: Path) -> Store:
    from idemtools.stores.postgres import PostgresStore

    from ..services import need_postgres

    table = f"bounds_{uuid.uuid4().hex[:8]}"
    store = PostgresStore.from_url(need_postgres(), table=table, max_bytes=BUDGET)
    await store.create_schema()
    return store


async def _used(store: Store) -> int | None:
    """The store's own count of the bytes it holds, where it keeps one."""
    if isinstance(store, MemoryStore):
        return store.bytes_used
    used = getattr(store, "bytes_used", None)
    if callable(used):
        value: int = await used()
        return value
    return None


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.services)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    make: Callable[[Path], Any] = {"memory": _memory, "sqlite": _sqlite, "postgres": _postgres}[
        request.param
    ]
    made: Store = await make(tmp_path)
    try:
        yield made
    finally:
        drop = getattr(made, "drop_schema", None)
        if drop is not None:
            await drop()
        await made.aclose()


async def test_150_concurrent_1mb_outcomes_stay_within_a_16mib_budget(store: Store) -> None:
    engine = Engine(store)
    runs: dict[str, int] = {}
    started = asyncio.Event()

    def call(i: int) -> ToolCall:
        policy = Policy.of(scope=shared, lease=60, retention=600)
        return ToolCall(name="big", arguments={"i": i}, key=f"k{i}", policy=policy)

    def tool(i: int) -> Callable[[], Any]:
        async def run() -> Outcome:
            runs[f"k{i}"] = runs.get(f"k{i}", 0) + 1
            if len(runs) == CALLS:
                started.set()
            await asyncio.wait_for(started.wait(), 30)  # every claim is in before any completes
            return Outcome(result={"content": [{"type": "text", "text": TEXT}], "isError": False})

        return run

    firsts = await asyncio.gather(*(engine.handle(call(i), tool(i)) for i in range(CALLS)))
    assert all(f.result is not None for f in firsts)  # every caller got its answer
    recorded = 0
    tombstones = 0
    for i in range(CALLS):
        record = await store.get(engine_scope(engine, call(i)), f"k{i}")
        assert record is not None and record.outcome is not None
        recorded += len(record.outcome)
        tombstones += is_tombstone(record.outcome)
    assert recorded <= BUDGET, f"recorded {recorded} bytes against a {BUDGET}-byte budget"
    used = await _used(store)
    assert used is None or used <= BUDGET, used
    assert 0 < tombstones < CALLS

    replays = not_kept = 0
    for i in range(CALLS):
        again = await engine.handle(call(i), tool(i))
        if again.result is not None:
            assert again.result == firsts[i].result
            replays += 1
        else:
            assert again.error is not None
            assert again.error["data"]["type"] == "idempotency_outcome_not_kept"
            assert again.error["data"]["idempotencyKey"] == f"k{i}"
            not_kept += 1
    assert replays + not_kept == CALLS and not_kept == tombstones
    assert runs == {f"k{i}": 1 for i in range(CALLS)}, "a retry ran the tool again"


def engine_scope(engine: Engine, call: ToolCall) -> str:
    from idemtools.engine.decision import scope_hash

    policy = engine.policy_for(call.name, call.policy)
    return scope_hash(policy, call.context, cast(str, call.key))  # a raw key is `object`


# -- fair defaults: one caller cannot lock the others out -----------------------------------


def _session_call(session: str, key: str, text: str = "") -> ToolCall:
    from idemtools.scopes import CallContext, per_session

    context = CallContext(transport="http", session_id=session)
    policy = Policy.of(lease=60, retention=600, scope=per_session)
    return ToolCall(name="pay", arguments={"n": len(text)}, key=key, context=context, policy=policy)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("size", [10, 1_000_000], ids=["small", "1mb"])
async def test_default_store_cannot_be_filled_by_one_caller(
    kind: str, size: int, tmp_path: Path
) -> None:
    """A store built with its defaults (bar a smaller total, to keep the test fast): a flooder
    with unique keys is refused once it holds its share, and another caller still executes,
    records and replays. Before, the flooder filled the store and everybody got
    `idempotency_store_full`."""
    store: Store
    if kind == "memory":  # default max_records 100,000: the flood of small outcomes is 10,001
        bound: dict[str, Any] = {"max_bytes": 64 << 20} if size > 10 else {}
        store = MemoryStore(**bound)
    else:
        # A flooder is checked once the file is half full: it stops near half of it.
        store = SQLiteStore(tmp_path / "fair.db", max_bytes=(12 << 20) if size > 10 else 256 << 10)
    engine = Engine(store)
    text = "x" * size
    runs: list[str] = []

    def tool(key: str) -> Callable[[], Any]:
        async def run() -> Outcome:
            runs.append(key)
            return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False})

        return run

    try:
        refused: dict[str, Any] | None = None
        for i in range(200_000):  # bounded: the share is reached long before
            answer = await engine.handle(_session_call("flooder", f"f{i}", text), tool(f"f{i}"))
            if answer.error is not None:
                refused = answer.error
                break
        assert refused is not None and refused["data"]["type"] in ("idempotency_quota_exceeded",), (
            refused
        )
        flooded = len(runs)
        others = 1 if kind == "sqlite" and size > 10 else 3  # its share: 1.2 MiB of 12
        for i in range(others):  # another caller: executes, records its whole answer, replays
            first = await engine.handle(_session_call("other", f"o{i}", text), tool(f"o{i}"))
            again = await engine.handle(_session_call("other", f"o{i}", text), tool(f"o{i}"))
            assert first.result is not None and again.result == first.result
        assert len(runs) == flooded + others
    finally:
        await store.aclose()
