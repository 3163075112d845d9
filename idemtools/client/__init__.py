"""Client helper: send `tools/call` with an `idempotencyKey`, and retry it safely.

Why a helper: neither SDK line's `call_tool` can carry an extra param, so a keyed call has to be
built and sent by hand. And the retry rules are the point of the SEP: retry with the *same* key
after a lost response (transport loss, timeout) or an `idempotency_key_in_progress` refusal
(after its `retryAfterMs`), never after a conflict, never forever.

    key = new_key()  # one key per logical operation: keep it for every retry of it
    result = await call_tool(session, "charge", {"amount": 4200}, idempotency_key=key)

The key is always the caller's choice: the helper never makes one up, because a key created
inside the call cannot be reused by the caller's own retry after a crash or restart.

Before sending, the helper checks that the server advertises `capabilities.tools.idempotency`
(the SEP: a client relying on deduplication SHOULD): a server without it ignores the key and may
run a retry twice, so the call is refused with `IdempotencyNotSupportedError` unless
`require_capability=False`.

`session` is a connected client session (mcp 1.x `ClientSession`; mcp 2.x `ClientSession` or
`Client`), or an async callable returning one: with a callable, a lost transport is replaced by a
new connection and the call retried there with the same key.

Importing this module loads only the client side (no engine, store or server adapter) and
changes nothing a server sees: keys are sent with request models of the client's own (the SDK's
`CallToolRequestParams` stays as it is), and on mcp 2.x the capability is read through the SDK's
`ClientSession` alone (`ToolsCapability` stays as it is; see `idemtools.client.sdk_mcp2`).
Import it before connecting, so that the session keeps the capability the server declares.
"""

from __future__ import annotations

from .call import (
    NO_RETRY,
    Advertised,
    KeyedSession,
    OutcomeUnknownError,
    RetryKeys,
    RetryPolicy,
    ToolIdempotency,
    advertises_idempotency,
    call_tool,
    list_tool_idempotency,
    new_key,
    tool_idempotency,
)

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
