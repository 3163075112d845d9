"""Client helper: send `tools/call` with an `idempotencyKey`, and retry it safely.

Why a helper: neither SDK line's `call_tool` can carry an extra param, so a keyed call has to be
built and sent by hand. And the retry rules are the point of the SEP: retry with the *same* key
after a lost response (transport loss, timeout) or an `idempotency_key_in_progress` refusal
(after its `retryAfterMs`), never after a conflict, never forever.

    result = await call_tool(session, "charge", {"amount": 4200}, idempotency_key=key)

`session` is a connected client session (mcp 1.x `ClientSession`; mcp 2.x `ClientSession` or
`Client`), or an async callable returning one: with a callable, a lost transport is replaced by a
new connection and the call retried there with the same key.

Importing this module declares `idempotencyKey` on the SDK's `CallToolRequestParams` and, on mcp
2.x, `idempotency` on `ToolsCapability`, so that keys reach the wire and the capability can be
read. Import it before connecting.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from .adapters import SDK2
from .engine import key_digest
from .errors import InProgressError, StoreUnavailableError, error_from_data

__all__ = ["NO_RETRY", "RetryPolicy", "advertises_idempotency", "call_tool", "new_key"]

log = logging.getLogger("idemtools.client")

if SDK2:
    from .adapters import mcp2 as _sdk

    _sdk.declare_capability_field()
else:
    from .adapters import mcp1 as _sdk
_sdk.declare_key_field()

SessionSource = Any | Callable[[], Awaitable[Any]]

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    OSError,
)


def new_key() -> str:
    """A fresh key: UUID4, enough entropy that unrelated calls never collide (SEP, Security)."""
    return str(uuid.uuid4())


def advertises_idempotency(session: Any) -> bool:
    """True when the server declared `capabilities.tools.idempotency`.

    Without it, a key is harmless but guarantees nothing: the server may run a retry twice.
    """
    return _sdk.advertises(getattr(session, "session", session) if SDK2 else session)


@dataclass(frozen=True)
class RetryPolicy:
    """How `call_tool` retries. Every retry reuses the same key, so none can run the tool twice.

    Attributes:
        attempts: total tries, the first included.
        timeout: seconds to wait for each answer (None: the session's default).
        initial_delay, max_delay, multiplier: exponential backoff with full jitter between tries;
            an in-progress refusal waits its `retryAfterMs` instead (capped by `max_delay`).
    """

    attempts: int = 5
    timeout: float | None = 30.0
    initial_delay: float = 0.1
    max_delay: float = 5.0
    multiplier: float = 2.0

    def backoff(self, attempt: int) -> float:
        ceiling = min(self.max_delay, self.initial_delay * self.multiplier**attempt)
        return random.uniform(0, ceiling)


NO_RETRY = RetryPolicy(attempts=1)


async def _session(source: SessionSource, fresh: bool, current: Any) -> Any:
    if callable(source) and not hasattr(source, "send_request") and not hasattr(source, "session"):
        if current is None or fresh:
            return await source()
        return current
    return source


async def call_tool(
    session: SessionSource,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    idempotency_key: str | None = None,
    retry: RetryPolicy | None = None,
) -> Any:
    """Call a tool with an idempotency key, retrying lost answers with the same key.

    Returns the SDK's `CallToolResult` (an `isError` result is returned, not raised: the tool
    ran). Raises `ConflictError` at once when the key was used with other arguments, the other
    `RefusedError` subclasses for refusals that a retry cannot fix, and the last transport or
    timeout error when every attempt is spent.
    """
    key = idempotency_key if idempotency_key is not None else new_key()
    policy = retry if retry is not None else RetryPolicy()
    args = dict(arguments) if arguments is not None else None
    current: Any = None
    fresh = True
    last: BaseException | None = None
    for attempt in range(policy.attempts):
        if attempt:
            # Keys are client data: logged as the same digest the server logs, never raw.
            log.info("retrying %s (attempt %d) key_digest=%s", name, attempt + 1, key_digest(key))
        delay = policy.backoff(attempt)
        try:
            current = await _session(session, fresh, current)
            fresh = False
            return await _sdk.send_call(current, name, args, key, policy.timeout)
        except _TRANSPORT_ERRORS as exc:
            last, fresh = exc, True
        except Exception as exc:
            error = _sdk.rpc_error(exc)
            if error is None:
                raise
            code, message, data = error
            refused = error_from_data(message, data)
            if isinstance(refused, InProgressError):
                last, delay = refused, min(policy.max_delay, refused.retry_after_ms / 1000)
            elif isinstance(refused, StoreUnavailableError):
                last = refused  # the call did not run: safe to try again
            elif refused is not None:  # conflict and the rest: a retry cannot fix them
                raise refused from exc
            elif code in _sdk.REQUEST_TIMEOUT_CODES:
                last = exc  # the answer was lost, the call may have run: same key again
            elif code in _sdk.CONNECTION_CLOSED_CODES:
                last, fresh = exc, True
            else:
                raise
        if attempt + 1 < policy.attempts:
            await anyio.sleep(delay)
    assert last is not None
    raise last
