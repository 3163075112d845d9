"""The engine's store wrapper and runtime accessor: every store operation is
timed, whichever call site sends it, and a missing private asyncio function fails loudly."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from idemtools import CallContext, Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall
from idemtools.engine.store_calls import StoreCalls, StoreFailure, original
from idemtools.stores import MemoryStore
from idemtools.stores.base import ToolWrites

POLICY = Policy.of(retention=600, lease=30, scope=shared)


def call(key: str, policy: Policy = POLICY) -> ToolCall:
    return ToolCall(name="t", arguments={"a": 1}, key=key, context=CallContext(), policy=policy)


async def run_ok() -> Outcome:
    return Outcome(result={"content": [], "isError": False})


def operations(reader: InMemoryMetricReader) -> dict[str, int]:
    data = reader.get_metrics_data()
    counts: dict[str, int] = {}
    point: Any  # a histogram's points, with the attributes OTel types as optional
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "idemtools.store.duration":
                    for point in metric.data.data_points:
                        op = str(point.attributes["idemtools.store.operation"])
                        counts[op] = counts.get(op, 0) + point.count
    return counts


def metered(store: Any) -> tuple[Engine, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    engine = Engine(
        store, registry=Registry(), meter_provider=MeterProvider(metric_readers=[reader])
    )
    return engine, reader


class LostAnswer(MemoryStore):
    """The first `complete` lands, then its answer is lost (the connection broke)."""

    lost = False

    async def complete(self, *args: Any, **kwargs: Any) -> bool:
        done = await super().complete(*args, **kwargs)
        if not self.lost:
            self.lost = True
            raise ConnectionError("answer lost")
        return done


async def test_the_read_after_a_lost_answer_is_timed() -> None:
    engine, reader = metered(LostAnswer())
    answer = await engine.handle(call("k-lost"), run_ok)
    assert answer.result is not None
    assert engine.stats.record_failures == 0 and engine.stats.lost_claims == 0
    # The re-sent completion finds the owner's own record: a store answers it yes (no read).
    assert operations(reader) == {"claim": 1, "complete": 2}


class FailingCommit(MemoryStore):
    """A transactional store whose commit fails: the engine releases the key."""

    @asynccontextmanager
    async def execution(self, scope: str, key: str, owner: str) -> AsyncIterator[ToolWrites | None]:
        yield None
        raise ConnectionError("commit failed")


async def test_the_release_after_a_failed_transaction_is_timed() -> None:
    engine, reader = metered(FailingCommit())
    policy = Policy.of(lease=30, transactional=True, scope=shared)
    answer = await engine.handle(call("k-tx", policy), run_ok)
    assert answer.error is not None
    assert answer.error["data"]["type"] == "idempotency_store_unavailable"
    assert engine.stats.record_failures == 1
    assert operations(reader) == {"claim": 1, "complete": 1, "release": 1}


async def test_a_driver_error_comes_out_as_a_store_failure_carrying_it() -> None:
    class Broken(MemoryStore):
        async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
            raise ConnectionError("gone")

    engine = Engine(Broken(), registry=Registry())
    calls = StoreCalls(engine.store, engine.telemetry, engine.stats)
    with pytest.raises(StoreFailure) as caught:
        await calls.release("s", "k", "o")
    assert isinstance(original(caught.value), ConnectionError)
