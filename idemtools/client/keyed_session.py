"""`KeyedSession`: an MCP client session whose `call_tool` sends an `idempotencyKey`.

Why: the clients people run retry `tools/call` blindly (an agent framework's retry loop, a
timeout wrapper, a model that calls the tool again) and none of them sends a key, so a retry
after a lost answer runs the tool a second time. Wrap the session they use:

    session = KeyedSession(session)      # an mcp ClientSession (1.x or 2.x) or a 2.x Client
    await session.call_tool("charge", {"amount": 4200})   # same signature, same result

The rule that picks the key (see docs/clients.md):

- A call whose outcome is *unknown* — a transport error, a timeout, a cancellation, a lost
  connection, the SDK's `-32000` "Connection closed" and `-32800` "Request cancelled" (the
  server's execution carries on behind them), `idempotency_key_in_progress` after the wait
  below, `idempotency_store_unavailable`, `idempotency_outcome_unknown` — leaves its key
  behind for `window` seconds (capped by the tool's published retention when `tools/list`
  carried it). The next call of the same tool
  with equivalent arguments (idemtools' canonical comparison: key order, number spelling and
  `{}`/`None` never matter) reuses that key, so the server replays instead of running again.
- A *definite* answer — a result, `isError` too, a JSON-RPC error from the tool, every other
  idemtools refusal — forgets the key: the next equal call is a new operation with a new key.
- `idempotency_outcome_unknown` (the server or the proxy's upstream died mid-call: whether the
  side effect happened is unknown, for good) is raised as `OutcomeUnknownError` and its key is
  kept like an unknown outcome's, so an equal retry — a framework's retry loop — gets the same
  answer and runs nothing. Only the application can decide to act again, after checking the
  effect, with a new key of its own (`idempotency_key=new_key()`). Never resent here; inside
  an `operation()` a later attempt raises it again without sending.
- `idempotency_key_in_progress` is waited out inside `call_tool` (its `retryAfterMs`, at most
  `in_progress_wait` seconds in all) with the same key, before anything reaches the caller.

`idemtools.client.call_tool` "never makes a key up"; this does, because its key is reused only
for a retry of an unknown outcome within the window, never for a new operation. Its limit: two
genuinely distinct but equal calls, the first of which timed out, become one operation. Pass
`idempotency_key=` per call, or `key_for=`, where that matters (or where a key must survive a
process: a Temporal activity retried on another worker).

The key is added to the SDK's own `tools/call` request (the session's `send_request`, for the
calls this wrapper makes only), so everything else the SDK's `call_tool` does — progress, `_meta`,
output validation, `Mcp-Param-*` headers — is unchanged. Multi-round-trip continuations
(`input_responses` / `request_state`) carry no key, as the SEP's FAQ says.

One wrapper per end user: a `KeyedSession` shared by several end users on one credential (one
server-side scope) hands an equal retry's key to whichever user sends the equal call next, so
one user could be given another's recorded answer. Wrap the session per user, or give
`key_for=` a key that includes the user.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import anyio

from ..canonical import CanonicalizationError, fingerprint
from ..errors import OutcomeUnknownError, error_from_data
from ._base import ToolIdempotency, advertises, new_key, not_supported, sdk

__all__ = [
    "DEFAULT_IN_PROGRESS_WAIT",
    "DEFAULT_WINDOW",
    "KeyFor",
    "KeyedSession",
    "RetryKeys",
    "classify",
    "operation",
]

log = logging.getLogger("idemtools.client")

DEFAULT_WINDOW = 600.0
"""Seconds an unknown outcome's key stays reusable: long enough for a framework's retries and a
model's second try, short enough that a genuinely new equal call much later gets its own key."""

DEFAULT_IN_PROGRESS_WAIT = 60.0
"""Seconds `call_tool` waits out `idempotency_key_in_progress` before handing it to the caller."""

KeyFor = Callable[[str, Mapping[str, Any] | None], "str | None"]
"""`key_for(name, arguments)`: a key of your own (None: use the rule)."""

# The SDK's codes for an answer that was lost while the request may have run: a read timeout
# (1.x: 408, 2.x: -32001), a cancelled request (-32800), a closed connection (-32000).
_UNKNOWN_CODES = frozenset({408, -32001, -32800, -32000})
_UNKNOWN_TYPES = frozenset({"idempotency_key_in_progress", "idempotency_store_unavailable"})
_IN_PROGRESS = "idempotency_key_in_progress"
_OUTCOME_UNKNOWN = "idempotency_outcome_unknown"
_MAX_REMEMBERED = 1024

_Self = TypeVar("_Self", bound="KeyedSession")

Outcome = Literal["unsent", "unknown", "in_progress", "definite"]


def _rpc_error(exc: BaseException) -> tuple[int, Any] | None:
    """(code, data) of the SDK's JSON-RPC error exception (`McpError` / `MCPError`), else None.

    Read by shape, so that this module imports no SDK line in particular.
    """
    if not type(exc).__module__.startswith("mcp."):
        return None
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    return code, getattr(error, "data", None)


def classify(exc: BaseException, answered: bool = False, sent: bool = True) -> Outcome:
    """Whether the tool may have run when `exc` ended a keyed attempt.

    `answered`: the server's answer had arrived (an error raised after it, e.g. the SDK's output
    validation, is definite). `sent`: the request had been handed to the transport.
    """
    rpc = _rpc_error(exc)
    if rpc is not None:
        code, data = rpc
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == _IN_PROGRESS:
            return "in_progress"
        if kind in _UNKNOWN_TYPES or kind == _OUTCOME_UNKNOWN:
            return "unknown"  # the key is kept: an equal retry gets the same answer
        if isinstance(kind, str) and kind.startswith("idempotency_"):
            return "definite"  # every other idemtools refusal: a retry cannot change it
        return "unknown" if code in _UNKNOWN_CODES and not answered else "definite"
    if answered:
        return "definite"
    if not sent:
        return "unsent"
    # Transport errors, timeouts, cancellation, exception groups from a transport's task group:
    # the request was out and no answer came back.
    return "unknown"


def _retry_after(exc: BaseException) -> float:
    rpc = _rpc_error(exc)
    data = rpc[1] if rpc is not None else None
    value = data.get("retryAfterMs") if isinstance(data, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value / 1000
    return 0.25


@dataclass
class _Operation:
    """One logical call: its key, and when that key was first sent."""

    name: str
    fingerprint: str | None
    key: str
    started: float = field(default_factory=time.monotonic)
    reused: bool = False
    outcome: Outcome = "unsent"
    """The last sent attempt's outcome: "unsent" never overwrites what an earlier one left."""
    spans_attempts: bool = False
    """An `operation()`: its attempts record their outcome here, the block files it at the end."""
    settled: OutcomeUnknownError | None = None
    """The server answered `idempotency_outcome_unknown`: later attempts raise it unsent."""

    def attempted(self, outcome: Outcome) -> None:
        if outcome != "unsent":
            self.outcome = outcome


class RetryKeys:
    """The keys of calls whose outcome is unknown, by tool and canonical arguments.

    Share one between sessions (`KeyedSession(s, retry_keys=keys)`) when a retry may go out on
    another session than the attempt it repeats: a reconnect, a framework's fresh session.
    Bounded: at most 1024 remembered keys (the oldest is forgotten first).
    """

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        if window < 0:
            raise ValueError("window must be >= 0 seconds")
        self.window = window
        self._pending: collections.OrderedDict[str, collections.deque[_Operation]] = (
            collections.OrderedDict()
        )
        self._count = 0
        self._retention: dict[str, float] = {}

    def note_tools(self, tools: Any) -> None:
        """Read published retentions from a `tools/list` result's tools (their `_meta`)."""
        for tool in tools or ():
            info = ToolIdempotency.from_meta(getattr(tool, "meta", None))
            name = getattr(tool, "name", None)
            if info is not None and isinstance(name, str):
                self._retention[name] = float(info.retention)

    def limit(self, name: str) -> float:
        """Seconds a key of `name` stays reusable: the window, capped by published retention."""
        return min(self.window, self._retention.get(name, self.window))

    def begin(self, name: str, arguments: Mapping[str, Any] | None) -> _Operation:
        """The operation for this call: an unknown outcome's key if one is live, else new."""
        try:
            fp: str | None = fingerprint(name, arguments)
        except (CanonicalizationError, TypeError, ValueError):
            fp = None  # not comparable: always a new operation
        if fp is not None:
            queue = self._pending.get(fp)
            limit, now = self.limit(name), time.monotonic()
            while queue:
                op = queue.popleft()
                self._count -= 1
                if now - op.started < limit:
                    op.reused = True
                    if not queue:
                        del self._pending[fp]
                    log.info(
                        "reusing the key of an earlier call to %s whose outcome is unknown", name
                    )
                    return op
            self._pending.pop(fp, None)
        return _Operation(name=name, fingerprint=fp, key=new_key())

    def file(self, op: _Operation) -> None:
        """After `op`'s last attempt: keep its key if the outcome is unknown, else forget it."""
        if op.outcome in ("unknown", "in_progress"):
            self.unknown(op)

    def unknown(self, op: _Operation) -> None:
        """Keep `op`'s key for an equal retry: its attempt may have run."""
        op.outcome = "unknown"
        if op.fingerprint is None:
            return
        self._pending.setdefault(op.fingerprint, collections.deque()).append(op)
        self._pending.move_to_end(op.fingerprint)
        self._count += 1
        while self._count > _MAX_REMEMBERED:
            fp, queue = next(iter(self._pending.items()))
            queue.popleft()
            self._count -= 1
            if not queue:
                del self._pending[fp]

    def __len__(self) -> int:
        return self._count


_CURRENT: contextvars.ContextVar[_Operation | None] = contextvars.ContextVar(
    "idemtools_keyed_operation", default=None
)


@contextlib.contextmanager
def operation(
    retry_keys: RetryKeys,
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    key: str | None = None,
) -> Iterator[_Operation]:
    """One logical call of `name` spanning several attempts: a framework's own retry loop.

    Every `KeyedSession.call_tool(name, …)` inside the block (in this task, or in tasks it
    starts), on whichever session, sends this operation's key; when the block ends, the last
    sent attempt's outcome decides, as for a single call: unknown keeps the key for an equal
    later call (within the window), definite forgets it. The key itself comes from the rule: an
    earlier equal operation whose outcome is unknown lends its key. `key`: the caller's own
    key for this operation instead (not remembered: the caller reuses it).
    """
    op = retry_keys.begin(name, arguments) if key is None else _Operation(name, None, key)
    op.spans_attempts = True
    token = _CURRENT.set(op)
    try:
        yield op
    finally:
        _CURRENT.reset(token)
        retry_keys.file(op)


@dataclass
class _Sending:
    """What the next `tools/call` out of one `send_request` must carry (per task)."""

    target: Any
    name: str
    key: str
    sent: bool = False
    answered: bool = False


_SENDING: contextvars.ContextVar[_Sending | None] = contextvars.ContextVar(
    "idemtools_keyed_sending", default=None
)
_PATCHED = "_idemtools_keyed_send_request"


def _with_key(request: Any, key: str, name: str) -> Any | None:
    """`request` with `idempotencyKey` in its params, if it is the `tools/call` for `name`."""
    root = getattr(request, "root", request)  # mcp 1.x wraps requests in `ClientRequest`
    params: Any = getattr(root, "params", None)
    if getattr(root, "method", None) != "tools/call" or getattr(params, "name", None) != name:
        return None
    keyed = sdk.with_key(root, key)  # a client-only request model on 2.x: no SDK class changed
    if root is not request:
        keyed = request.model_copy(update={"root": keyed})
    wire = keyed.model_dump(by_alias=True, mode="json", exclude_none=True)
    if (wire.get("params") or {}).get("idempotencyKey") != key:
        # Fail closed: never send what the caller believes is a keyed call without its key.
        raise RuntimeError(
            "this mcp version drops idempotencyKey from tools/call params; KeyedSession "
            "cannot send a keyed call with it"
        )
    return keyed


def _client_session(session: Any) -> Any:
    """The object whose `send_request` carries `tools/call` (a 2.x `Client` holds a session)."""
    if callable(getattr(type(session), "send_request", None)):
        return session
    inner = getattr(session, "session", None)
    if inner is not None and callable(getattr(type(inner), "send_request", None)):
        return inner
    raise TypeError(
        f"KeyedSession needs an mcp ClientSession (or a 2.x Client), got {type(session).__name__}"
    )


def _intercept(target: Any) -> None:
    """Let `target.send_request` add the key for calls a KeyedSession makes (once per session).

    An instance attribute, not a class patch: only this session is touched, and only a call
    marked in the current task's context is changed.
    """
    if _PATCHED in vars(target):
        return
    original = target.send_request

    async def send_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        sending = _SENDING.get()
        if sending is not None and sending.target is target and not sending.sent:
            keyed = _with_key(request, sending.key, sending.name)
            if keyed is not None:
                request, sending.sent = keyed, True
                result = await original(request, *args, **kwargs)
                sending.answered = True
                return result
        return await original(request, *args, **kwargs)

    target.send_request = send_request
    vars(target)[_PATCHED] = True


class KeyedSession:
    """An mcp client session (1.x or 2.x `ClientSession`, 2.x `Client`) that sends keys.

    `call_tool` has the wrapped session's signature and return type, plus `idempotency_key=`;
    every other attribute is the wrapped session's. See the module docstring for the rule.

    Args:
        session: the connected session to wrap (it is used, not copied).
        retry_keys: where unknown outcomes' keys are kept; share one `RetryKeys` between the
            sessions a retry may go out on. Default: a new one with `window`.
        window: seconds an unknown outcome's key stays reusable (default 600).
        key_for: `key_for(name, arguments) -> str | None`, a key of your own for each call
            (None: the rule). For keys that must survive a process.
        require_capability: refuse (`IdempotencyNotSupportedError`) to call a server that does
            not advertise `capabilities.tools.idempotency`: it ignores keys, and a retry may run
            the tool twice. False calls it anyway.
        in_progress_wait: seconds, in all, to wait out `idempotency_key_in_progress`.

    One wrapper per end user: shared by several users on one credential, it would lend one
    user's unknown-outcome key to another's equal call, who would then get the first user's
    recorded answer. Wrap per user, or pass a `key_for` whose keys include the user.
    """

    def __init__(
        self,
        session: Any,
        *,
        retry_keys: RetryKeys | None = None,
        window: float = DEFAULT_WINDOW,
        key_for: KeyFor | None = None,
        require_capability: bool = True,
        in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT,
    ) -> None:
        self.wrapped = session
        self.retry_keys = retry_keys if retry_keys is not None else RetryKeys(window)
        self.key_for = key_for
        self.require_capability = require_capability
        self.in_progress_wait = in_progress_wait

    def __getattr__(self, name: str) -> Any:
        # Only attributes this wrapper lacks reach here; never delegate its own (a copy being
        # built has no `wrapped` yet) or the interpreter's protocol lookups.
        if name == "wrapped" or (name.startswith("__") and name.endswith("__")):
            raise AttributeError(name)
        return getattr(self.wrapped, name)

    async def __aenter__(self: _Self) -> _Self:
        await self.wrapped.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.wrapped.__aexit__(*exc)

    async def list_tools(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped `list_tools`; published retentions (they cap the window) are read."""
        result = await self.wrapped.list_tools(*args, **kwargs)
        self.retry_keys.note_tools(getattr(result, "tools", result))
        return result

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: Any = None,
        progress_callback: Any = None,
        *,
        idempotency_key: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """The wrapped `call_tool`, with an `idempotencyKey` chosen by the rule (or given)."""
        if read_timeout_seconds is not None:
            kwargs["read_timeout_seconds"] = read_timeout_seconds
        if progress_callback is not None:
            kwargs["progress_callback"] = progress_callback
        if kwargs.get("input_responses") is not None or kwargs.get("request_state") is not None:
            # An MRTR continuation is outside idempotency (SEP FAQ): it carries no key.
            return await self.wrapped.call_tool(name, arguments, **kwargs)
        key, op = self.choose_key(name, arguments, idempotency_key)
        return await self.send(self.wrapped.call_tool, name, arguments, key, op, kwargs)

    def choose_key(
        self, name: str, arguments: Mapping[str, Any] | None, own: str | None
    ) -> tuple[str, _Operation | None]:
        """The key for this call: `own`, else `key_for`'s, else the rule's (with its operation)."""
        if own is None and self.key_for is not None:
            own = self.key_for(name, arguments)
        if own is not None:
            if not isinstance(own, str):
                raise TypeError(f"idempotency key must be a str, got {type(own).__name__}")
            return own, None
        current = _CURRENT.get()
        if current is not None and current.name == name:
            return current.key, current  # an attempt of the enclosing operation()
        op = self.retry_keys.begin(name, arguments)
        return op.key, op

    async def send(
        self,
        method: Callable[..., Awaitable[Any]],
        name: str,
        arguments: Mapping[str, Any] | None,
        key: str,
        op: _Operation | None,
        kwargs: dict[str, Any],
    ) -> Any:
        """`method(name, arguments, **kwargs)` with `key` on its `tools/call`; in_progress is
        waited out, and the outcome filed (an unknown one keeps `op`'s key for a retry)."""
        outcome: Outcome = "unsent"
        try:  # from here on every exit files the outcome (a reused key survives "unsent")
            if op is not None and op.settled is not None:
                raise op.settled  # a retry loop's next attempt: the answer will not change
            target = _client_session(self.wrapped)  # a FastMCP Client raises when disconnected
            if self.require_capability and not advertises(target):
                raise not_supported(name, target)
            _intercept(target)
            deadline = time.monotonic() + self.in_progress_wait
            while True:
                sending = _Sending(target=target, name=name, key=key)
                token = _SENDING.set(sending)
                try:
                    result = await method(name, arguments, **kwargs)
                    outcome = "definite"
                    return result
                except BaseException as exc:
                    outcome = classify(exc, answered=sending.answered, sent=sending.sent)
                    remaining = deadline - time.monotonic()
                    if outcome != "in_progress" or remaining <= 0:
                        unknown = _outcome_unknown(exc)
                        if unknown is None:
                            raise
                        if op is not None and op.spans_attempts:
                            op.settled = unknown
                        raise unknown from exc
                    delay = min(_retry_after(exc), remaining)
                finally:
                    _SENDING.reset(token)
                log.info("%s is in progress under its key: waiting %.2f s", name, delay)
                await anyio.sleep(delay)
        finally:
            if op is not None:
                self._file(op, outcome)

    def _file(self, op: _Operation, outcome: Outcome) -> None:
        # A reused key whose retry was never sent is still the earlier attempt's: its outcome
        # stays "unknown", and the key is kept.
        op.attempted(outcome)
        if not op.spans_attempts:
            self.retry_keys.file(op)


def _outcome_unknown(exc: BaseException) -> OutcomeUnknownError | None:
    """The typed error for the server's `idempotency_outcome_unknown` answer (by `data.type`)."""
    rpc = _rpc_error(exc)
    if rpc is None or not isinstance(rpc[1], dict) or rpc[1].get("type") != _OUTCOME_UNKNOWN:
        return None
    message = getattr(getattr(exc, "error", None), "message", None) or str(exc)
    found = error_from_data(str(message), rpc[1])
    return found if isinstance(found, OutcomeUnknownError) else None
