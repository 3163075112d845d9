"""The identities behind the derived keys, in process: what is stable, what separates.

LangGraph (an in-memory checkpointer) and DBOS (a SQLite system database): two steps or two
calls never share a key; the engine's own retry of a step, and a re-execution of a failed step,
get the keys of the attempt they repeat; a new run of a LangGraph thread gets new keys; outside
a step there is no key (an error, never a made-up key). And the digest itself: any change of
engine, identity, index, name or arguments changes it; key order in the arguments does not.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemtools.integrations._durable import StepCalls, derive_key

# -- the digest ------------------------------------------------------------------------------

_text = st.text(max_size=8)
_args = st.dictionaries(_text, st.integers() | _text, max_size=3)


@given(_text, st.lists(_text, max_size=3), st.integers(0, 5), _text, _args, st.data())
def test_every_part_of_the_material_changes_the_key(
    engine: str, identity: list[str], index: int, name: str, arguments: dict[str, Any], data: Any
) -> None:
    key = derive_key(engine, identity, index, name, arguments)
    assert key == derive_key(engine, identity, index, name, dict(reversed(arguments.items())))
    assert key.startswith("step-") and len(key) == 5 + 64
    changed = data.draw(st.sampled_from(["engine", "identity", "index", "name", "arguments"]))
    other: dict[str, Any] = dict(
        engine=engine, identity=identity, index=index, name=name, arguments=arguments
    )
    other[changed] = {
        "engine": engine + "x",
        "identity": [*identity, ""],
        "index": index + 1,
        "name": name + "x",
        "arguments": {**arguments, "\x00extra": 1},
    }[changed]
    assert derive_key(**other) != key


def test_the_nth_call_of_an_execution_gets_the_nth_key() -> None:
    first, again = StepCalls("e", ["w", "1"]), StepCalls("e", ["w", "1"])
    keys = [first.key("charge", {"a": 1}) for _ in range(3)]
    assert len(set(keys)) == 3
    assert [again.key("charge", {"a": 1}) for _ in range(3)] == keys


# -- LangGraph -------------------------------------------------------------------------------


def _langgraph() -> Any:
    return pytest.importorskip("langgraph.func", reason="langgraph is not installed")


def test_langgraph_task_identity() -> None:
    func = _langgraph()
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import RetryPolicy

    from idemtools.integrations.langgraph import task_key

    seen: list[str] = []
    failures = {"flaky": 1, "broken": 1}

    @func.task
    async def two_calls(amount: int) -> list[str]:
        return [task_key("charge", {"amount": amount}), task_key("charge", {"amount": amount})]

    @func.task(retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False))
    async def flaky(amount: int) -> str:
        seen.append(task_key("charge", {"amount": amount}))
        if failures["flaky"]:
            failures["flaky"] -= 1
            raise ConnectionError("lost the answer")
        return seen[-1]

    @func.task
    async def broken(amount: int) -> str:
        seen.append(task_key("charge", {"amount": amount}))
        if failures["broken"]:
            failures["broken"] -= 1
            raise ConnectionError("lost the answer; no retry policy: the run fails")
        return seen[-1]

    @func.entrypoint(checkpointer=InMemorySaver())
    async def workflow(amount: int) -> dict[str, Any]:
        a = await two_calls(amount)
        b = await two_calls(amount)
        return {"a": a, "b": b, "flaky": await flaky(amount), "broken": await broken(amount)}

    async def main() -> None:
        config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}"}}
        with pytest.raises(ConnectionError):
            await workflow.ainvoke(7, config, durability="sync")
        assert seen[0] == seen[1], "a RetryPolicy retry is the same operation: the same key"
        first = await workflow.ainvoke(None, config, durability="sync")  # resume the failed run
        assert seen[2] == seen[3], "the failed task re-executed: the key of its first attempt"
        keys = [*first["a"], *first["b"], first["flaky"], first["broken"]]
        assert len(set(keys)) == 6, "two calls of a task, two tasks: never one key"
        assert first["flaky"] == seen[1]

        second = await workflow.ainvoke(7, config, durability="sync")  # a new run, same input
        again = [*second["a"], *second["b"], second["flaky"], second["broken"]]
        assert not set(again) & set(keys), "a new run of the thread: new checkpoint, new keys"

    anyio.run(main)


def test_langgraph_outside_a_task_raises() -> None:
    _langgraph()
    from idemtools.integrations.langgraph import task_key

    with pytest.raises(RuntimeError, match="running LangGraph task"):
        task_key("charge", {})


# -- DBOS ------------------------------------------------------------------------------------


def test_dbos_step_identity(dbos: Any) -> None:
    from idemtools.integrations.dbos import step_key

    DBOS = dbos
    seen: list[str] = []
    failures = [1]

    @DBOS.step()
    async def two_calls(amount: int) -> list[str]:
        return [step_key("charge", {"amount": amount}), step_key("charge", {"amount": amount})]

    @DBOS.step(retries_allowed=True, max_attempts=2, interval_seconds=0.01)
    async def flaky(amount: int) -> str:
        seen.append(step_key("charge", {"amount": amount}))
        if failures[0]:
            failures[0] -= 1
            raise ConnectionError("lost the answer")
        return seen[-1]

    @DBOS.workflow()
    async def workflow(amount: int) -> list[str]:
        with pytest.raises(RuntimeError, match="running DBOS step"):
            step_key("charge", {"amount": amount})  # the workflow's own code: no step id
        return [*await two_calls(amount), *await two_calls(amount), await flaky(amount)]

    async def main() -> tuple[list[str], list[str]]:
        first = await workflow(5)
        second = await workflow(5)  # another workflow id: another operation
        return first, second

    first, second = anyio.run(main)
    assert len(set(first)) == 5, "two calls of a step, two steps: never one key"
    assert seen[0] == seen[1] == first[-1], "a DBOS step retry is the same operation"
    assert not set(first) & set(second)
