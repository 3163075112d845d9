"""What the proxy answers when it cannot know whether the upstream ran a keyed call.

The upstream died, its pipe or connection broke, or it did not answer within the tool's
`max_runtime`: the call may or may not have run. In the library a tool's own error is the
call's outcome; here that uncertainty is. It is recorded and replayed as a JSON-RPC error with
`error.data.type` `idempotency_outcome_unknown`, so the tool never runs twice under one key; the
client decides, with a new key, whether to try again. The answer is the engine's own
(`idemtools.engine.unknown`), so the library and the proxy record the same thing.

An upstream that died has no late answer: that record stays. One only silent past
`max_runtime` may still answer: its late answer replaces the record (`late_unknown`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ..engine.unknown import OUTCOME_UNKNOWN, StillRunning
from ..engine.unknown import outcome_unknown as _unknown
from ..errors import NOT_PROCESSED, ErrorCodes
from ..outcome import Outcome

__all__ = [
    "OUTCOME_UNKNOWN",
    "OUTCOME_UNKNOWN_CODE",
    "UPSTREAM_UNAVAILABLE",
    "UpstreamLost",
    "late_unknown",
    "not_sent",
    "outcome_unknown",
    "unavailable_error",
]

OUTCOME_UNKNOWN_CODE = ErrorCodes().idempotency_outcome_unknown
"""Next to idemtools' own codes (-31051..-31060), outside -32768..-32000 as the 2026-07-28
spec asks of application codes. Clients read `error.data.type`, not the code."""

UPSTREAM_UNAVAILABLE = -32603
"""JSON-RPC "Internal error": the upstream was gone before the call was sent (nothing ran)."""
UPSTREAM_UNAVAILABLE_TYPE = "upstream_unavailable"


class UpstreamLost(Exception):
    """The upstream cannot answer this request any more (it exited, or the link broke)."""

    def __init__(self, reason: str, *, sent: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.sent = sent
        """False when the request never left the proxy: then nothing can have run."""


def outcome_unknown(key: str, reason: str) -> Outcome:
    """The recorded outcome of a keyed call whose upstream answer is lost for good."""
    return _unknown(key, f"the upstream server gave no answer ({reason})")


def late_unknown(key: str, reason: str, later: Awaitable[Outcome | None]) -> Outcome:
    """`outcome_unknown` for an upstream still silent past `max_runtime`: recorded so that its
    late answer, awaited by `later` (None: none came), replaces it."""
    unknown = outcome_unknown(key, reason)
    return StillRunning(error=unknown.error, later=later)


def not_sent(reason: str) -> Outcome:
    """The answer to a keyed call that never reached the upstream: not recorded (`final` is
    False), so a retry once the upstream is back runs it."""
    return Outcome(error=unavailable_error(reason, sent=False), final=False)


def unavailable_error(reason: str, *, sent: bool) -> dict[str, Any]:
    """The JSON-RPC error for a request the upstream could not take or answer (unrecorded).

    `sent`: the request left the proxy, so the upstream may have acted on it; only a request
    that never left carries `data.notProcessed` (it provably had no effect).
    """
    data: dict[str, Any] = {"type": UPSTREAM_UNAVAILABLE_TYPE}
    if not sent:
        data[NOT_PROCESSED] = True
    return {
        "code": UPSTREAM_UNAVAILABLE,
        "message": f"upstream unavailable ({reason})",
        "data": data,
    }
