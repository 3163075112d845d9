"""A `complete` that lands but whose answer is lost (a timeout, a dropped connection): the
engine's next attempt finds the key already completed. That record is this execution's own,
so the call is recorded, not a "lost claim" (real stores: Memory, SQLite, Redis)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from idemtools import Engine, Outcome, Policy, Registry, StoreUnavailableError, shared
from idemtools.engine import ToolCall
from idemtools.stores import MemoryStore, SQLiteStore

from ..services import RUN_ID, need_redis

POLICY = Policy.of(retention=60, lease=30, scope=shared)


def _losing(base: type) -> Any:
    class LosesTheFirstAnswer(base):  # type: ignore[misc, valid-type]
        """The first `complete` is written, then its answer never arrives."""

        lost = False

        async def complete(self, *args: Any, **kwargs: Any) -> bool:
            done: bool = await super().complete(*args, **kwargs)
            if not self.lost:
                self.lost = True
                raise StoreUnavailableError("the answer was lost on the way back")
            return done

    return LosesTheFirstAnswer


async def _store(kind: str, tmp_path: Path) -> Any:
    if kind == "memory":
        return _losing(MemoryStore)()
    if kind == "sqlite":
        return _losing(SQLiteStore)(tmp_path / "lost.sqlite")
    from idemtools.stores.redis import RedisStore

    prefix = f"idemtools-test:{RUN_ID}:lost:{uuid.uuid4().hex[:6]}:"
    return _losing(RedisStore).from_url(need_redis(), prefix=prefix)


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)]
)
async def test_a_completion_whose_answer_was_lost_is_recorded_not_lost(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await _store(kind, tmp_path)
    engine = Engine(store, registry=Registry())
    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        return Outcome(result={"content": [{"type": "text", "text": "paid"}], "isError": False})

    call = ToolCall(name="charge", arguments={"amount": 1}, key="k", policy=POLICY)
    try:
        with caplog.at_level(logging.WARNING, logger="idemtools"):
            first = await engine.handle(call, tool)
        assert store.lost, "the first answer was lost"
        assert first.error is None
        assert engine.stats.lost_claims == 0 and engine.stats.record_failures == 0
        assert not any("another execution" in r.getMessage() for r in caplog.records)
        again = await engine.handle(call, tool)
        assert again.replayed and runs == 1
    finally:
        await engine.aclose()
