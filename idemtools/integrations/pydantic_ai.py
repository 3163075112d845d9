"""Keys from pydantic-ai's MCP toolsets (`pydantic-ai-slim[mcp]`): `KeyedMCPToolset`.

    from pydantic_ai import Agent
    from idemtools.integrations.pydantic_ai import KeyedMCPToolset

    toolset = KeyedMCPToolset("http://127.0.0.1:8000/mcp")   # MCPToolset's arguments
    agent = Agent("openai:gpt-5", toolsets=[toolset])

The framework's retry path (read in pydantic-ai 2.68): `MCPToolset` sits on FastMCP's `Client`
and calls `client.call_tool(name=…, arguments=…, meta=…, raise_on_error=…)` once per tool call.
It does not resend by itself: any `McpError` (a timeout, a lost connection, an
`idempotency_key_in_progress` refusal) and, by default, a tool error become `ModelRetry`, and
the *model* then emits a new tool call with a new tool-call id. A key derived from the tool-call
id would therefore make "in progress" or "timed out" a second execution.

The rule here is `KeyedSession`'s: the retry is recognised by its content, an equal call (same
tool, canonically equal arguments) after an attempt whose outcome is unknown, within the window;
it reuses that attempt's key, so the server replays or reports the one execution. A definite
answer (a result, a tool error) makes the next equal call a new operation. `in_progress` is
waited out inside the call (its `retryAfterMs`, bounded) before pydantic-ai sees anything.

`KeyedMCPToolset` is an `MCPToolset` whose `client` is always a keyed FastMCP client: the one
built or given at construction, and the one a per-run copy (`for_run`, for per-run auth or
headers) builds for itself — that copy gets keys of its own (another user's run never lends
one).
"""

from __future__ import annotations

from typing import Any, cast

from fastmcp import Client
from pydantic_ai.mcp import MCPToolset  # type: ignore[import-not-found,unused-ignore]  # an optional extra

from ..client.keyed_session import DEFAULT_IN_PROGRESS_WAIT, DEFAULT_WINDOW, KeyFor
from .fastmcp import KeyedClient

__all__ = ["KeyedMCPToolset"]

_CLIENT = "_idemtools_client"
_OPTIONS = "_idemtools_options"


class KeyedMCPToolset(MCPToolset[Any]):  # type: ignore[misc,unused-ignore]  # Any without pydantic-ai
    """`MCPToolset` whose tool calls send `idempotencyKey` (KeyedSession's rule).

    Takes `MCPToolset`'s arguments, plus `idempotency_window` (seconds an unknown outcome's key
    stays reusable), `require_capability` (refuse a server that does not advertise
    `capabilities.tools.idempotency`), `in_progress_wait` (seconds to wait out in_progress)
    and `key_for` (a key of your own per call, None: the rule; under a durable agent, the
    engine's: `idemtools.integrations.dbos.key_for` under a `DBOSAgent`,
    `idemtools.integrations.temporal.activity_key_for` under a `TemporalAgent`, so that a tool
    call re-run after a crash sends the same key).
    """

    def __init__(
        self,
        *args: Any,
        idempotency_window: float = DEFAULT_WINDOW,
        require_capability: bool = True,
        in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT,
        key_for: KeyFor | None = None,
        **kwargs: Any,
    ) -> None:
        self.__dict__[_OPTIONS] = {
            "window": idempotency_window,
            "require_capability": require_capability,
            "in_progress_wait": in_progress_wait,
            "key_for": key_for,
        }
        super().__init__(*args, **kwargs)

    @property
    def client(self) -> Client[Any]:
        return cast("Client[Any]", self.__dict__[_CLIENT])

    @client.setter
    def client(self, value: Client[Any]) -> None:
        if not isinstance(value, KeyedClient):
            value = cast("Client[Any]", KeyedClient(value, **self.__dict__[_OPTIONS]))
        self.__dict__[_CLIENT] = value
