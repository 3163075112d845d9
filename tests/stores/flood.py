"""A flood, end to end: one caller floods unique keys, others are unaffected.

Run through the `Engine` (scope resolution, hashing, refusal mapping) against a real store with
a per-scope quota, so what is proved is what a client sees: the flooder gets
`idempotency_quota_exceeded` once its scope is at the quota, nothing of its runs beyond it, its
own retries still replay, and another caller keeps executing and replaying as if nothing
happened. Each store's test module calls `flood_scenario` with a store it built.
"""

from __future__ import annotations

from typing import Any

from idemtools.engine import Engine, ToolCall
from idemtools.errors import ErrorCodes
from idemtools.outcome import Outcome
from idemtools.policy import Policy, Registry
from idemtools.scopes import CallContext, per_session
from idemtools.stores.base import Store

__all__ = ["flood_scenario"]

POLICY = Policy.of(lease=30, retention=60, scope=per_session)


def _call(session: str, key: str) -> ToolCall:
    context = CallContext(transport="http", session_id=session)
    return ToolCall(name="pay", arguments={"to": session}, key=key, context=context, policy=POLICY)


def _type(outcome: Outcome) -> Any:
    return None if outcome.error is None else outcome.error["data"]["type"]


async def flood_scenario(store: Store, quota: int, *, flood: int = 20) -> None:
    """`store` must have `max_records_per_scope=quota` and be empty for sessions used here."""
    assert flood > quota
    engine = Engine(store, registry=Registry())
    runs: list[str] = []

    def tool(session: str, key: str) -> Any:
        async def run() -> Outcome:
            runs.append(f"{session}/{key}")
            return Outcome(result={"content": [{"type": "text", "text": key}], "isError": False})

        return run

    answers = [
        await engine.handle(_call("flooder", f"f{i}"), tool("flooder", f"f{i}"))
        for i in range(flood)
    ]
    assert [_type(a) for a in answers[:quota]] == [None] * quota
    refused = answers[quota:]
    assert {_type(a) for a in refused} == {"idempotency_quota_exceeded"}, refused
    assert all(a.error is not None and a.error["code"] == -31058 for a in refused)
    assert ErrorCodes().idempotency_quota_exceeded == -31058
    assert len(runs) == quota  # nothing beyond the quota ran

    # Another caller is untouched: it executes, and its retries replay.
    for i in range(3):
        first = await engine.handle(_call("victim", f"v{i}"), tool("victim", f"v{i}"))
        assert _type(first) is None, first
        again = await engine.handle(_call("victim", f"v{i}"), tool("victim", f"v{i}"))
        assert again == first
    assert len(runs) == quota + 3

    # The flooder's own retries of keys it holds still replay: a quota never blocks a retry.
    replay = await engine.handle(_call("flooder", "f0"), tool("flooder", "f0"))
    assert replay == answers[0]
    assert len(runs) == quota + 3
    assert engine.stats.store_errors == 0
