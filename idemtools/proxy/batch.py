"""JSON-RPC batches (a JSON array of messages): split, so that no keyed call bypasses the engine.

MCP 2025-03-26 allowed batches; later revisions removed them, and most SDKs' stdio servers
refuse an array outright. Relayed unchanged, a keyed `tools/call` inside one would reach the
upstream undeduplicated: a retried batch would run it twice. So a batch that holds a keyed call
(or a `notifications/cancelled` for a keyed call in flight) is split, on stdio and HTTP alike:

- each keyed call is decided by the engine, exactly as on its own;
- every other entry is forwarded upstream **on its own** (as a single message, ids preserved),
  which every protocol revision accepts, also an upstream that never supported batches;
- a cancellation of a keyed call in flight is dropped, as on its own;
- an entry that is not a JSON object is answered `-32600 Invalid Request` (JSON-RPC 2.0), and
  an entry the proxy refuses on its own (`ingress.refusal`) gets that refusal;
- the client gets one batch response: an array holding the response to every request of the
  batch, in the batch's order, ids preserved; notifications get none (JSON-RPC's batch rules).

A batch that needs nothing from the proxy is relayed unchanged, as any other message. One with a
nested batch or an entry the proxy refuses is split too: the upstream never sees them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from .ingress import error_response, refusal
from .keyed import is_keyed

__all__ = ["INVALID_REQUEST", "Batch", "Kind", "cancel_target", "invalid", "kind", "needs_split"]

INVALID_REQUEST = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}'
"""JSON-RPC 2.0's answer to a batch entry that is not a request object (`invalid` adds
`error.data.type`)."""


class Kind(enum.Enum):
    KEYED = "keyed"
    """Decided by the engine."""
    REQUEST = "request"
    """Forwarded; its response goes into the batch response."""
    NOTICE = "notice"
    """A notification, or a response to a server request: forwarded, nothing comes back."""
    INVALID = "invalid"
    """Not a JSON object, or refused (`ingress.refusal`): answered by the proxy (`invalid`)."""


def kind(entry: Any) -> Kind:
    if not isinstance(entry, dict) or refusal(entry) is not None:
        return Kind.INVALID
    if is_keyed(entry):
        return Kind.KEYED
    if "method" in entry and entry.get("id") is not None:
        return Kind.REQUEST
    return Kind.NOTICE


def cancel_target(entry: Any) -> Any:
    """The `requestId` a `notifications/cancelled` entry cancels (None for anything else)."""
    if not isinstance(entry, dict) or entry.get("method") != "notifications/cancelled":
        return None
    params = entry.get("params")
    return params.get("requestId") if isinstance(params, dict) else None


def invalid(entry: Any) -> dict[str, Any]:
    """The proxy's answer to an entry of `Kind.INVALID`."""
    refused = refusal(entry)
    return refused if refused is not None else error_response(None, -32600, "Invalid Request")


def needs_split(
    entries: list[Any],
    keyed_in_flight: Callable[[Any], bool],
    rewrite: Callable[[Any], bool] | None = None,
) -> bool:
    """Whether the proxy must act on this batch: a keyed call in it, an entry it refuses (a
    nested batch too), a cancellation of a keyed call in flight, or an entry `rewrite` picks
    (on stdio: an id the proxy must alias). Any other batch is relayed unchanged."""
    for entry in entries:
        if isinstance(entry, list):
            return True
        if isinstance(entry, dict) and (is_keyed(entry) or refusal(entry) is not None):
            return True
        if rewrite is not None and rewrite(entry):
            return True
        target = cancel_target(entry)
        if target is not None and keyed_in_flight(target):
            return True
    return False


class Batch:
    """The responses of one split batch, assembled in the batch's order.

    `slot()` reserves a place for each request (in order), `fill(i, encoded)` puts its encoded
    response there (once; a second fill is ignored), and `seal()` says no more slots come:
    `on_done(array)` is called once every slot is filled and the batch is sealed.
    """

    def __init__(self, on_done: Callable[[bytes], None]) -> None:
        self.slots: list[bytes | None] = []
        self.missing = 0
        self.sealed = False
        self.done = False
        self.on_done = on_done

    def slot(self) -> int:
        self.slots.append(None)
        self.missing += 1
        return len(self.slots) - 1

    def fill(self, index: int, encoded: bytes) -> None:
        if self.slots[index] is not None:
            return
        self.slots[index] = encoded
        self.missing -= 1
        self._maybe_done()

    def seal(self) -> None:
        self.sealed = True
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.sealed and not self.missing and not self.done:
            self.done = True
            if self.slots:  # an all-notification batch gets no response at all
                self.on_done(b"[" + b",".join(s for s in self.slots if s is not None) + b"]")
