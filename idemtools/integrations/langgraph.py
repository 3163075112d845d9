"""Keys for MCP tool calls made inside a LangGraph task: `keyed_call`, `task_key`.

    from langgraph.func import entrypoint, task
    from idemtools.integrations.langgraph import keyed_call

    @task
    async def charge(order: str, amount: int) -> str:
        async with connect() as session:            # an mcp ClientSession, initialized
            result = await keyed_call(session, "charge", {"order": order, "amount": amount})
        return result.content[0].text

    @entrypoint(checkpointer=saver)                  # a durable checkpointer
    async def checkout(order: dict) -> str:
        return await charge(order["id"], order["amount"])

The functional API's tasks (and a graph's nodes: any LangGraph task) call the session
directly; no `ToolNode` and no langchain-mcp-adapters (which needs mcp < 2), so this works on
mcp 1.x and 2.x. With a checkpointer, LangGraph saves a task's result as a pending write of the
checkpoint its step started from. A process that dies after the tool ran and before that write
leaves the step unfinished; resuming the thread (`invoke(None, config)`) runs the entrypoint
again, which returns the saved results of finished tasks and runs the unfinished one again.

The key (read in langgraph 1.2): a digest of the thread id, the task's checkpoint namespace and
its task id, the index of the call within this execution of the task, the tool's name and its
canonical arguments. LangGraph computes a task id as a hash of the id of the checkpoint the step
started from, the namespace, the step number, the task's name and, for a functional task, its
parent's path and the index of the call in its parent. A resume starts from that same saved
checkpoint, so the task re-runs with the same id (that is how LangGraph finds its saved
writes); any other task differs in name, path or index. A new run of the thread (`invoke` with
input) first saves a new checkpoint, whose id is new (a UUID6), so its tasks have new ids and
its calls new keys. A `RetryPolicy` retry of the task keeps its id: the same operation, the
same keys.

Not covered: a new run (new input on the same thread, or a new thread) is a new operation and
runs the tool again. A replay from an earlier checkpoint (`checkpoint_id` in the config) re-runs
tasks under the ids they had: their calls are replayed by the server (within retention). A task
whose arguments change between executions sends another key. `durability="exit"` saves nothing
until the run ends, so a crash loses the step's checkpoint: use "sync" (the safe choice: a
step's checkpoint is saved before the next step runs) or "async".

An answer of `idempotency_outcome_unknown` is not worth a retry of the task (the retry sends the
same key and gets the same answer): `keyed_call` raises it as `TaskOutcomeUnknownError`, an
`OutcomeUnknownError` that is also a `RuntimeError`, which LangGraph's default retry predicate
(`default_retry_on`) never retries. A session opened inside the task wraps what its body raises
in an `ExceptionGroup`, which `default_retry_on` does retry: give such a task's `RetryPolicy`
`retry_on=retry_on`, the default predicate that also leaves unknown outcomes in groups alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import get_runtime  # type: ignore[import-not-found,unused-ignore]  # an optional extra
from langgraph.types import RetryPolicy  # type: ignore[import-not-found,unused-ignore]

from ..client.keyed_session import KeyedSession
from ..errors import OutcomeUnknownError
from ._durable import attempt_calls, outcome_unknown_in

__all__ = ["TaskOutcomeUnknownError", "keyed_call", "retry_on", "task_identity", "task_key"]

# LangGraph's default predicate (`langgraph._internal._retry.default_retry_on`), from its
# public `RetryPolicy`.
_DEFAULT_RETRY_ON: Any = RetryPolicy().retry_on


class TaskOutcomeUnknownError(OutcomeUnknownError, RuntimeError):
    """`idempotency_outcome_unknown` in a LangGraph task: an `OutcomeUnknownError` (catch it as
    one) that is also a `RuntimeError`, one of the classes LangGraph's `default_retry_on` does
    not retry. A retry would send the same key and get this same answer: the application
    decides, and acts again (if at all) under a new key: a new run of the thread."""


def retry_on(error: Exception) -> bool:
    """LangGraph's `default_retry_on`, except that an unknown outcome is never retried, also
    inside an exception group (what a session opened in the task raises).

        @task(retry_policy=RetryPolicy(retry_on=retry_on))"""
    if outcome_unknown_in(error) is not None:
        return False
    return bool(_DEFAULT_RETRY_ON(error))


ENGINE = "langgraph"


def _execution_info() -> Any:
    try:
        info = get_runtime().execution_info
    except (RuntimeError, AttributeError, KeyError):
        info = None
    if info is None or not getattr(info, "task_id", None):
        raise RuntimeError(
            "idemtools.integrations.langgraph needs a running LangGraph task: call it inside a "
            "@task function or a graph node (Python 3.11 or later for async code)"
        )
    return info


def task_identity() -> tuple[str, str, str]:
    """(thread id, checkpoint namespace, task id) of the LangGraph task running now.

    The thread id is "" without a checkpointer (nothing survives the process then)."""
    info = _execution_info()
    return str(info.thread_id or ""), str(info.checkpoint_ns), str(info.task_id)


def task_key(name: str, arguments: Mapping[str, Any] | None = None) -> str:
    """The key of this task's next call of `name` with `arguments` (it counts as a call).

    For clients other than an mcp session: `idemtools.client.call_tool(..., idempotency_key=
    task_key(name, arguments))`."""
    info = _execution_info()
    identity = (str(info.thread_id or ""), str(info.checkpoint_ns), str(info.task_id))
    calls = attempt_calls(ENGINE, identity, info, getattr(info, "node_attempt", None))
    return calls.key(name, arguments)


async def keyed_call(
    session: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """`session.call_tool(name, arguments, **kwargs)` with this task's derived key.

    `session`: an mcp `ClientSession` (or 2.x `Client`), or a `KeyedSession` for its options.
    A plain session is wrapped in a `KeyedSession`, which refuses a server that does not
    advertise idempotency and waits out `idempotency_key_in_progress` (the interrupted
    execution may still be running on the server). Returns the SDK's `CallToolResult`.
    `idempotency_outcome_unknown` is raised as `TaskOutcomeUnknownError`, which LangGraph's
    default retry predicate does not retry."""
    key = task_key(name, arguments)
    keyed = session if isinstance(session, KeyedSession) else KeyedSession(session)
    try:
        return await keyed.call_tool(name, arguments, idempotency_key=key, **kwargs)
    except OutcomeUnknownError as exc:
        if isinstance(exc, TaskOutcomeUnknownError):
            raise
        task_error = TaskOutcomeUnknownError(exc.message, key=exc.key)
        task_error.not_processed = exc.not_processed
        raise task_error from exc
