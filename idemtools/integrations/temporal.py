"""Keys from Temporal activities (`temporalio`): `keyed_call`, `activity_key`, `activity_key_for`.

    from temporalio import activity
    from idemtools.integrations.temporal import keyed_call

    @activity.defn
    async def charge(amount: int) -> str:
        async with connect() as session:           # any MCP client session, opened here
            result = await keyed_call(session, "charge", {"amount": amount})
        return result.content[0].text

Temporal runs an activity at least once: a worker that dies after the tool ran but before the
server recorded the activity's completion leaves the activity to time out, and the next attempt
(on any worker) runs it again. Every attempt sends `tools/call` again; the key is what lets the
MCP server recognise the retry. It is derived from the activity's identity as the Temporal
server records it (read in temporalio 1.35, `temporalio/worker/_activity.py`, where each
attempt's `activity.Info` is built from the server's task):

- a workflow's activity: namespace, workflow id, workflow **run id**, activity id. The activity
  id is the workflow's own (`str(seq)` of the workflow's command sequence unless the workflow
  passes `activity_id=`), recorded in the run's history: every attempt and every worker sees the
  same one. The run id is needed because activity ids start again at "1" in every run, and a
  closed workflow's id may be reused by a new run (Temporal's default reuse policy).
- a standalone activity (started by a client, no workflow): namespace, activity id and the
  activity's own run id (an activity id may be reused too).

Never in the key: `attempt`, `task_token`, `started_time`, `current_attempt_scheduled_time`
(they change with every attempt) and `heartbeat_details`. So a new run (continue-as-new, a
reset, a workflow retry, a reused workflow id) is a new operation for every activity it
schedules, and so is a local activity re-scheduled by the SDK after its `local_retry_threshold`
with a new sequence number, unless the workflow gives it an `activity_id=` of its own.

To that identity `derive_key` adds the call's index within this execution of the activity (its
n-th `keyed_call`, from 0), the tool's name and the canonical arguments, and hashes it all: the
key carries no workflow id in clear.

An answer of `idempotency_outcome_unknown` (the tool may have run; nobody will ever know from
the server) fails the activity for good: another attempt would send the same key and get the
same answer. `keyed_call` raises it as a non-retryable `ApplicationError` of type
"OutcomeUnknownError", so Temporal's retry policy (unlimited attempts by default) makes no
other attempt, and the workflow gets an `ActivityError` to decide on. A session opened inside
the activity (`async with` a transport and a `ClientSession`) wraps whatever its body raises
in an `ExceptionGroup`, which Temporal would retry: give the worker `OutcomeUnknownInterceptor`,
which fails such an activity non-retryable too (and one whose own client raised
`OutcomeUnknownError`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from temporalio import activity  # type: ignore[import-not-found,unused-ignore]  # an optional extra
from temporalio.exceptions import ApplicationError  # type: ignore[import-not-found,unused-ignore]
from temporalio.worker import (  # type: ignore[import-not-found,unused-ignore]
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from ..client import OutcomeUnknownError, RetryPolicy, call_tool
from ._durable import StepCalls

__all__ = [
    "OUTCOME_UNKNOWN_TYPE",
    "OutcomeUnknownInterceptor",
    "activity_key",
    "activity_key_for",
    "keyed_call",
]

ENGINE = "temporal"

OUTCOME_UNKNOWN_TYPE = OutcomeUnknownError.__name__
"""The `ApplicationError.type` of an unknown outcome: "OutcomeUnknownError", the name Temporal
gives an `OutcomeUnknownError` raised in any activity, so `RetryPolicy(non_retryable_error_types=
[OUTCOME_UNKNOWN_TYPE])` also covers a client of your own (`activity_key`, pydantic-ai)."""

# One StepCalls per execution of an activity, so that the n-th call of a retry gets the n-th
# key of the attempt it retries. The worker builds one `activity.Info` per attempt and
# `activity.info()` returns that same object for the whole attempt: it marks the execution.
_CALLS: dict[int, StepCalls] = {}


def _identity(info: Any) -> tuple[str, ...]:
    """The activity's identity, the same on every attempt and never another activity's."""
    if info.workflow_id is not None:
        if not info.workflow_run_id:
            raise RuntimeError("the activity's workflow has no run id: no key can be derived")
        return (
            "workflow",
            info.namespace,
            info.workflow_id,
            info.workflow_run_id,
            info.activity_id,
        )
    run_id = getattr(info, "activity_run_id", None)
    if not run_id:
        raise RuntimeError(
            "the activity has neither a workflow nor a run id of its own: no key can be derived"
        )
    return ("standalone", info.namespace, info.activity_id, run_id)


def _calls() -> StepCalls:
    try:
        info = activity.info()
    except RuntimeError as exc:
        raise RuntimeError(
            "keyed_call() and activity_key() derive the key from the running Temporal "
            "activity: call them inside an activity (not in workflow code, which must not "
            "do I/O)"
        ) from exc
    found = _CALLS.get(id(info))
    if found is None:
        found = _CALLS[id(info)] = StepCalls(ENGINE, _identity(info))
        weakref.finalize(info, _CALLS.pop, id(info), None)
    return found


def activity_key(name: str, arguments: Mapping[str, Any] | None = None) -> str:
    """The key of this activity's next tool call, for a client other than `keyed_call`.

    Why: a keyed call from a client of your own (`KeyedSession(key_for=...)`, a FastMCP
    client) needs the same key on every attempt of the activity. Each call takes the next
    index, so call it once per tool call, in the same order on every attempt. The count is
    per `activity.Info` object, which a worker builds anew for each attempt: in temporalio's
    `ActivityEnvironment`, give each run its own (`env.info = dataclasses.replace(env.info)`).
    """
    return _calls().key(name, arguments)


def activity_key_for(name: str, arguments: Mapping[str, Any] | None) -> str | None:
    """`activity_key` inside an activity, None elsewhere: a `key_for=` for keyed clients.

    Why: a framework that runs each MCP tool call in an activity of its own (pydantic-ai's
    `TemporalAgent`) calls the tool through its toolset's client, not through `keyed_call`.

        KeyedMCPToolset(url, key_for=activity_key_for)    # idemtools.integrations.pydantic_ai

    Outside an activity (the same toolset in an agent run without Temporal) it returns None,
    and the client's own rule picks the key.
    """
    if not activity.in_activity():
        return None
    return activity_key(name, arguments)


async def keyed_call(
    session: Any,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    retry: RetryPolicy | None = None,
    require_capability: bool = True,
) -> Any:
    """`idemtools.client.call_tool` with the key derived from the running activity.

    Why: an activity re-run after a worker crash sends the same call again; with this key the
    MCP server replays the recorded answer instead of running the tool twice. The n-th
    `keyed_call` of an attempt gets the key of the n-th call of every other attempt, so make
    the calls in the same order, with the same arguments, on every attempt (calls started
    together, e.g. by `asyncio.gather`, take their indexes in the order they start).

    `session`, `retry` and `require_capability` are `call_tool`'s: retries inside one attempt
    reuse the key too, and `idempotency_key_in_progress` (the previous attempt still running
    on a worker Temporal gave up on) is waited out, then raised for Temporal to retry later.

    `idempotency_outcome_unknown` is raised as `ApplicationError(type="OutcomeUnknownError",
    non_retryable=True)`, its details the answer's `error.data`, its cause the client's
    `OutcomeUnknownError`: another attempt would send the same key and get the same answer,
    so Temporal does not make one, and the workflow decides (a new key is a new activity or a
    new run). Raised inside `async with` a session, it leaves the activity in an
    `ExceptionGroup`: give the worker `OutcomeUnknownInterceptor` too.
    """
    key = _calls().key(name, arguments)  # taken before any await: the order of the calls
    try:
        return await call_tool(
            session,
            name,
            arguments,
            idempotency_key=key,
            retry=retry,
            require_capability=require_capability,
        )
    except OutcomeUnknownError as exc:
        raise _failure(exc, f"{name}: {exc.message}") from exc


def _failure(error: OutcomeUnknownError, message: str) -> ApplicationError:
    """The non-retryable failure for an unknown outcome; its details: the answer's error.data."""
    return ApplicationError(message, error.data, type=OUTCOME_UNKNOWN_TYPE, non_retryable=True)


def _unknown_failure(error: BaseException) -> ApplicationError | None:
    """The non-retryable failure `error` stands for: itself, the one `keyed_call` raised inside
    an exception group, or one made for an `OutcomeUnknownError` (bare or in a group) or for a
    retryable `ApplicationError` of its type (a framework's conversion of it)."""
    if isinstance(error, ApplicationError):
        if error.type != OUTCOME_UNKNOWN_TYPE:
            return None
        if error.non_retryable:
            return error
        return ApplicationError(
            error.message, *error.details, type=OUTCOME_UNKNOWN_TYPE, non_retryable=True
        )
    if isinstance(error, OutcomeUnknownError):
        return _failure(error, error.message)
    inner = getattr(error, "exceptions", None)  # an exception group, at any depth
    if isinstance(inner, tuple):
        for exc in inner:
            if isinstance(exc, BaseException) and (found := _unknown_failure(exc)) is not None:
                return found
    return None


class OutcomeUnknownInterceptor(Interceptor):  # type: ignore[misc,unused-ignore]
    """A worker interceptor: an activity whose tool call's outcome is unknown fails for good.

        Worker(client, task_queue=..., activities=[...], interceptors=[OutcomeUnknownInterceptor()])

    Why: a tool call inside `async with` an mcp session raises out of the session's task
    groups as an `ExceptionGroup`, which Temporal retries, and a client of your own (pydantic-ai's
    toolset with `activity_key_for`, `call_tool` with `activity_key`) raises a bare
    `OutcomeUnknownError`, which Temporal retries too. Each retry sends the same key and gets the
    same answer, until the policy gives up (never, by default). With this interceptor an
    activity that raised either fails with `ApplicationError(type="OutcomeUnknownError",
    non_retryable=True)`, caused by what it raised; every other outcome passes unchanged."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _NonRetryableUnknown(next)


class _NonRetryableUnknown(ActivityInboundInterceptor):  # type: ignore[misc,unused-ignore]
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        try:
            return await self.next.execute_activity(input)
        except BaseException as error:
            failure = _unknown_failure(error)
            if failure is None or failure is error:
                raise
            # keyed_call's keeps its cause (the client's OutcomeUnknownError); else the group.
            raise failure from (failure.__cause__ or error)
