"""Keys for calls made from a durable workflow's step, derived from the engine's own identity.

A durable engine (DBOS, Temporal, LangGraph) re-executes a step that was interrupted by a crash.
The step's identity as the engine records it (a workflow id and step id, a run id and activity
id, a checkpoint's task id) is the same on every re-execution of that step and different for any
other step or run, so a key derived from it, the index of the call within the step, the tool's
name and the canonical arguments is the same key on the retry and never shared by two
operations. The key carries no readable part of the identity: it is a digest, so workflow ids
never reach the server's logs.

An answer of `idempotency_outcome_unknown` is never worth a retry by the engine: the retry sends
the same key and gets the same answer. `outcome_unknown_in` finds it in what a step raised, also
inside the exception groups an MCP session's task groups wrap it in, so that each integration
can tell its engine not to retry.
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from ..canonical import canonicalize
from ..errors import OutcomeUnknownError

__all__ = ["StepCalls", "attempt_calls", "derive_key", "outcome_unknown_in"]

_PREFIX = "step-"


def derive_key(
    engine: str,
    identity: Sequence[str],
    index: int,
    name: str,
    arguments: Mapping[str, Any] | None,
) -> str:
    """The idempotency key of the `index`-th call (from 0) a step makes.

    `engine` names the engine ("dbos", "temporal", "langgraph") so that two engines never
    derive the same key from equal identities; `identity` is the engine's stable identity of
    the step, in order."""
    material = {
        "engine": engine,
        "identity": list(identity),
        "index": index,
        "name": name,
        "arguments": dict(arguments or {}),
    }
    return _PREFIX + hashlib.sha256(canonicalize(material)).hexdigest()


class StepCalls:
    """The calls of one execution of one step, in order: each gets the next index.

    Made anew each time the engine (re-)executes the step, so the n-th call of a re-execution
    gets the same key as the n-th call of the interrupted one."""

    __slots__ = ("_engine", "_identity", "_next")

    def __init__(self, engine: str, identity: Sequence[str]) -> None:
        self._engine = engine
        self._identity = tuple(identity)
        self._next = 0

    def key(self, name: str, arguments: Mapping[str, Any] | None) -> str:
        """The key of the next call this step makes."""
        index, self._next = self._next, self._next + 1
        return derive_key(self._engine, self._identity, index, name, arguments)


_ATTEMPT: contextvars.ContextVar[tuple[object, int | None, tuple[str, ...], StepCalls] | None] = (
    contextvars.ContextVar("idemtools_step_attempt", default=None)
)


def attempt_calls(
    engine: str, identity: Sequence[str], execution: object, attempt: int | None
) -> StepCalls:
    """The `StepCalls` of the step execution the caller runs in: made on its first keyed call.

    `execution` is an object the engine makes anew for each execution of a step and keeps for
    its duration, `attempt` its in-process retry number: a retry, or a re-execution after a
    crash or a failed run, starts again at index 0, as the calls it repeats did. Compared by
    identity (the object is held, so its id is never another's)."""
    ident = tuple(identity)
    current = _ATTEMPT.get()
    if current is not None:
        held, held_attempt, held_identity, calls = current
        if held is execution and held_attempt == attempt and held_identity == ident:
            return calls
    calls = StepCalls(engine, ident)
    _ATTEMPT.set((execution, attempt, ident, calls))
    return calls


def outcome_unknown_in(error: BaseException) -> OutcomeUnknownError | None:
    """The `OutcomeUnknownError` that `error` is, or holds in an exception group; else None.

    A call made inside `async with` an mcp session (or its transport) raises out of the
    session's anyio task groups wrapped in an `ExceptionGroup`, a group per task group; the
    groups are searched at any depth. A group that holds an unknown outcome among other errors
    counts as unknown: a retry of the step would get the same answer for that call. Causes
    (`raise ... from`) are not followed: an error raised from an unknown outcome is the code's
    own decision."""
    if isinstance(error, OutcomeUnknownError):
        return error
    inner = getattr(error, "exceptions", None)  # BaseExceptionGroup (3.11+, or the backport)
    if isinstance(inner, tuple):
        for exc in inner:
            if isinstance(exc, BaseException) and (found := outcome_unknown_in(exc)):
                return found
    return None
