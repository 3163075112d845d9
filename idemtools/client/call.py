"""`call_tool`: one keyed call with the retry loop a lost answer needs (see the package)."""

from __future__ import annotations

import contextlib
import logging
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from .._sdk import SDK2
from ..errors import (
    InProgressError,
    OutcomeUnknownError,
    StoreUnavailableError,
    error_from_data,
)
from ._base import (
    Advertised,
    ToolIdempotency,
    advertises,
    advertises_idempotency,
    key_digest,
    new_key,
    not_supported,
)
from ._base import sdk as _sdk
from .keyed_session import KeyedSession, RetryKeys

__all__ = [
    "NO_RETRY",
    "Advertised",
    "KeyedSession",
    "OutcomeUnknownError",
    "RetryKeys",
    "RetryPolicy",
    "ToolIdempotency",
    "advertises_idempotency",
    "call_tool",
    "list_tool_idempotency",
    "new_key",
    "tool_idempotency",
]

log = logging.getLogger("idemtools.client")


SessionSource = Any | Callable[[], Awaitable[Any]]

_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    ConnectionError,
    OSError,
)


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


class _Required:
    def __repr__(self) -> str:
        return "<required>"


_REQUIRED: Any = _Required()


def _unwrap(session: Any) -> Any:
    """The `ClientSession` itself (a 2.x `Client` holds one); records are cached against it."""
    return getattr(session, "session", session) if SDK2 else session


async def call_tool(
    session: SessionSource,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    idempotency_key: str = _REQUIRED,
    retry: RetryPolicy | None = None,
    require_capability: bool = True,
) -> Any:
    """Call a tool with an idempotency key, retrying lost answers with the same key.

    Args:
        idempotency_key: required. The key names one logical operation: create it once with
            `new_key()` (or derive it from your own operation id), keep it, and pass the same
            value on every retry, including one after your process restarts. None is refused
            too: a key made up per call could never be reused by a later retry.
        retry: how often and how long to retry (default `RetryPolicy()`; `NO_RETRY`: once).
            When `tool_idempotency()` has read the tool's published retention, retries also
            stop once the first attempt is older than it: after that the server no longer
            remembers the key, and a retry could run the tool again.
        require_capability: refuse (raise `IdempotencyNotSupportedError`) when the server
            does not advertise `capabilities.tools.idempotency`; such a server ignores the key
            and may run a retry twice. False sends the keyed call anyway.

    Returns the SDK's `CallToolResult` (an `isError` result is returned, not raised: the tool
    ran). Raises `ConflictError` at once when the key was used with other arguments, the other
    `RefusedError` subclasses for refusals that a retry cannot fix, and the last transport or
    timeout error when every attempt is spent.
    """
    # None too: sent as is it would make an unkeyed call that every retry runs again.
    if idempotency_key is _REQUIRED or idempotency_key is None:
        raise TypeError(
            "call_tool() needs idempotency_key=: the key names one logical operation, so the "
            "caller chooses it and reuses it for every retry of that operation. For a new "
            "operation pass idempotency_key=new_key() and keep the value (idemtools.client "
            "never makes a key up when none is given)"
        )
    if not isinstance(idempotency_key, str):
        raise TypeError(
            f"idempotency_key must be a str, got {type(idempotency_key).__name__}: "
            "use new_key(), or your operation's own id as text"
        )
    key = idempotency_key
    policy = retry if retry is not None else RetryPolicy()
    args = dict(arguments) if arguments is not None else None
    current: Any = None
    fresh = True
    last: BaseException | None = None
    started: float | None = None
    for attempt in range(policy.attempts):
        if attempt:
            # Keys are client data: logged as the same digest the server logs, never raw.
            log.info("retrying %s (attempt %d) key_digest=%s", name, attempt + 1, key_digest(key))
        delay = policy.backoff(attempt)
        try:
            current = await _session(session, fresh, current)
            fresh = False
            if require_capability and not advertises(current):
                raise not_supported(name, current)
            if started is None:
                started = time.monotonic()
            return await _sdk.send_call(current, name, args, key, policy.timeout)
        except _TRANSPORT_ERRORS as exc:
            last, fresh = exc, True
        except Exception as exc:
            error = _sdk.rpc_error(exc)
            if error is None:
                raise
            code, message, data = error
            # idemtools' refusals are told apart by `data.type` only (codes are configurable);
            # the SDK's own codes below mean what the SDK means by them.
            refused = error_from_data(message, data)
            if isinstance(refused, InProgressError):
                last, delay = refused, min(policy.max_delay, refused.retry_after_ms / 1000)
            elif isinstance(refused, StoreUnavailableError):
                last = refused  # the call did not run: safe to try again
            elif refused is not None:  # conflict and the rest: a retry cannot fix them
                # OutcomeUnknownError among them: whether it ran is unknown for good, and only
                # the application may decide to act again, under a new key.
                raise refused from exc
            elif code in _sdk.UNKNOWN_OUTCOME_CODES:
                last = exc  # the answer was lost, the call may have run: same key again
            elif code in _sdk.CONNECTION_CLOSED_CODES:
                last, fresh = exc, True
            else:
                raise
        if attempt + 1 < policy.attempts:
            known = _known_tool(current, name)
            elapsed = time.monotonic() + delay - (started or time.monotonic())
            if known is not None and started is not None and elapsed >= known.retention:
                log.warning(
                    "not retrying %s: its retention (%d s) would be over, and a retry could "
                    "run it again key_digest=%s",
                    name,
                    known.retention,
                    key_digest(key),
                )
                break
            await anyio.sleep(delay)
    assert last is not None
    raise last


# -- per-tool metadata (opt-in on the server: install(..., advertise_tool_metadata=True)) ------


_TOOL_INFO: weakref.WeakKeyDictionary[Any, dict[str, ToolIdempotency]] = weakref.WeakKeyDictionary()
_LIST_PAGE_CAP = 100


def _known_tool(session: Any, name: str) -> ToolIdempotency | None:
    if session is None:
        return None
    try:
        return _TOOL_INFO.get(_unwrap(session), {}).get(name)
    except TypeError:  # a session object that cannot be weakly referenced
        return None


async def list_tool_idempotency(session: Any) -> dict[str, ToolIdempotency]:
    """Every tool's published idempotency metadata, by name (reads all of `tools/list`).

    Tools without metadata are absent: the server did not opt in (`install(...,
    advertise_tool_metadata=True)`), or it is not an idemtools server. The answer is kept for
    this session, so that `call_tool` can stop retrying a tool once its retention is over.
    """
    found: dict[str, ToolIdempotency] = {}
    cursor: str | None = None
    for _ in range(_LIST_PAGE_CAP):
        tools, cursor = await _sdk.list_tools_page(session, cursor)
        for tool in tools:
            info = ToolIdempotency.from_meta(getattr(tool, "meta", None))
            if info is not None:
                found[tool.name] = info
        if cursor is None:
            break
    with contextlib.suppress(TypeError):  # a session that cannot be weakly referenced
        _TOOL_INFO[_unwrap(session)] = found
    return found


async def tool_idempotency(
    session: Any, name: str, *, refresh: bool = False
) -> ToolIdempotency | None:
    """One tool's published idempotency metadata, or None when the server publishes none.

    Lists the tools once per session (again with `refresh=True`, e.g. after
    `notifications/tools/list_changed`).
    """
    cached = None
    if not refresh:
        with contextlib.suppress(TypeError):
            cached = _TOOL_INFO.get(_unwrap(session))
    if cached is None:
        cached = await list_tool_idempotency(session)
    return cached.get(name)
