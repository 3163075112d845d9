"""The three ways an execution ends, and the one answer for the case nobody can know.

    released  the tool was never entered (a refusal before it, a shutdown, a cancellation
              before the claim was used, an answer that is not final): the claim is deleted
              and a retry runs the tool.
    recorded  the tool returned or raised: that outcome is recorded and every retry within
              the retention replays it.
    unknown   the tool was entered and its end will not be recorded (the process died, the
              tool outlived `max_runtime`, an upstream was lost mid-call): it may or may not
              have acted. The answer is `idempotency_outcome_unknown`, recorded like an
              outcome, so no retry runs it a second time; the client decides, with a new key,
              whether to act again.

The rule is one sentence: run a key's tool only when no earlier execution of it can have
entered the tool, unless the tool's policy says otherwise (`Policy.on_lapse`). The library
and the proxy both answer "unknown" through `outcome_unknown` here, so the recorded answer
is the same wherever it was written.

An unknown outcome written while the tool may still be running (past `max_runtime`) is
written `replaceable` under the running call's owner: if the tool does end, its real outcome
replaces it, and retries from then on replay that. No other owner can replace it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ErrorCodes, OutcomeUnknownError
from ..outcome import Outcome

__all__ = [
    "OUTCOME_UNKNOWN",
    "Ending",
    "StillRunning",
    "ending_of",
    "is_outcome_unknown",
    "outcome_unknown",
]

OUTCOME_UNKNOWN = OutcomeUnknownError.type
"""`error.data.type` of the answer: `idempotency_outcome_unknown`."""

_CODES = ErrorCodes()


class Ending(enum.Enum):
    """How one execution ended (see the module docstring)."""

    RELEASED = "released"
    RECORDED = "recorded"
    UNKNOWN = "unknown"


def outcome_unknown(
    key: str, reason: str, *, codes: ErrorCodes | None = None, data: dict[str, Any] | None = None
) -> Outcome:
    """The answer for a keyed call that may have run and whose end is not known.

    `reason` says why, for the client's message (never a store's or driver's details).
    The error carries `data.type` `idempotency_outcome_unknown` and the key, so a client can
    tell it from every other refusal without reading the code (configurable in `codes`).
    """
    error = OutcomeUnknownError(
        f"{reason}; the call may or may not have run, and it will not run again under this "
        "idempotencyKey: check whether it took effect, and retry with a new key if it must",
        key=key,
    )
    payload = dict(error.data)
    if data:
        payload.update(data)
    return Outcome.of_error((codes or _CODES).code_for(OUTCOME_UNKNOWN), error.message, payload)


@dataclass(frozen=True, slots=True)
class StillRunning(Outcome):
    """What a `run()` returns when it stops waiting past `max_runtime` while the work goes on
    elsewhere (the proxy's upstream): an `idempotency_outcome_unknown` answer, recorded
    replaceable under the call's owner and answered now, and `later`, awaited in the
    background, whose outcome (None: there will be none, the record stays) replaces it."""

    later: Awaitable[Outcome | None] | None = field(default=None, compare=False)


def is_outcome_unknown(outcome: Outcome) -> bool:
    """True for an `idempotency_outcome_unknown` answer (recorded or not)."""
    error = outcome.error
    if error is None:
        return False
    data = error.get("data")
    return isinstance(data, dict) and data.get("type") == OUTCOME_UNKNOWN


def ending_of(outcome: Outcome) -> Ending:
    """How an execution that produced `outcome` ends: a non-final answer releases the claim,
    an unknown one is recorded as unknown, anything else is the tool's recorded outcome."""
    if not outcome.final:
        return Ending.RELEASED
    return Ending.UNKNOWN if is_outcome_unknown(outcome) else Ending.RECORDED
