"""The key idemtools.integrations.temporal derives from `activity.Info`, as a worker builds it.

For any two attempts, the keys are equal exactly when namespace, workflow id, run id and
activity id are (attempt number, task token and times never count); the n-th call of an attempt
gets the n-th key of every attempt; outside an activity there is no key. Run with temporalio's
`ActivityEnvironment`, which hands the activity the `Info` it is given, as a worker does.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("temporalio", reason="temporalio is not installed (extra temporal)")

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from idemtools.integrations.temporal import activity_key

CALL = ("charge", {"amount": 4200, "currency": "usd"})


async def _keys(info: Any, calls: int = 1) -> list[str]:
    """The keys of an activity's first `calls` equal calls, on an attempt with `info`."""

    @activity.defn
    async def step() -> list[str]:
        return [activity_key(*CALL) for _ in range(calls)]

    env = ActivityEnvironment()
    env.info = info
    return await env.run(step)  # type: ignore[no-any-return]


def _info(**fields: Any) -> Any:
    return dataclasses.replace(ActivityEnvironment.default_info(), **fields)


IDENTITY = ("namespace", "workflow_id", "workflow_run_id", "activity_id")
names = st.sampled_from(["a", "b"])
moments = st.integers(0, 10**9).map(lambda s: datetime.fromtimestamp(s, tz=timezone.utc))
attempts = st.fixed_dictionaries(
    {
        "namespace": names,
        "workflow_id": names,
        "workflow_run_id": names,
        "activity_id": names,
        "attempt": st.integers(1, 50),
        "task_token": st.binary(min_size=1, max_size=8),
        "started_time": moments,
        "current_attempt_scheduled_time": moments,
        "heartbeat_details": st.lists(st.integers(), max_size=2),
        "is_local": st.booleans(),
        "task_queue": names,
    }
)


@settings(max_examples=60, deadline=None)
@given(attempts, attempts)
async def test_keys_are_equal_exactly_when_the_identity_is(one: Any, other: Any) -> None:
    same = all(one[f] == other[f] for f in IDENTITY)
    assert ((await _keys(_info(**one))) == (await _keys(_info(**other)))) == same


async def test_a_retry_gets_the_keys_of_the_attempt_it_retries_in_order() -> None:
    first = _info(attempt=1, task_token=b"t1")
    retry = _info(attempt=2, task_token=b"t2", started_time=first.started_time + timedelta(1))
    keys = await _keys(first, calls=3)
    assert len(set(keys)) == 3  # equal calls of one attempt are distinct operations
    assert await _keys(retry, calls=3) == keys
    assert all(k.startswith("step-") and "test-run" not in k for k in keys)  # a digest


async def test_a_new_run_of_the_same_workflow_id_gets_new_keys() -> None:
    # Activity ids start again at "1" in a new run (continue-as-new, a reset, a reused id).
    one = await _keys(_info(workflow_run_id="run-1"))
    assert one != await _keys(_info(workflow_run_id="run-2"))


async def test_a_standalone_activity_is_keyed_by_its_own_run_id() -> None:
    alone = {"workflow_id": None, "workflow_run_id": None, "workflow_type": None}
    one = await _keys(_info(**alone, activity_run_id="r1"))
    assert one == await _keys(_info(**alone, activity_run_id="r1", attempt=3))
    assert one != await _keys(_info(**alone, activity_run_id="r2"))
    assert one != await _keys(_info(activity_run_id="r1"))  # never a workflow activity's key
    with pytest.raises(RuntimeError, match="no key can be derived"):
        await _keys(_info(**alone))


def test_outside_an_activity_there_is_no_key() -> None:
    with pytest.raises(RuntimeError, match="inside an activity"):
        activity_key(*CALL)
