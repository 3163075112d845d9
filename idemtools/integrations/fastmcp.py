"""Keys from FastMCP 4.x's `Client` (the standalone `fastmcp` package): `KeyedClient`.

    from fastmcp import Client
    from idemtools.integrations.fastmcp import KeyedClient

    async with KeyedClient(Client("http://127.0.0.1:8000/mcp")) as client:
        result = await client.call_tool("charge", {"amount": 4200})
        result.data            # FastMCP's parsed result, as from Client.call_tool

Why a wrapper: `Client.call_tool` sends no key, and `idemtools.client.call_tool(client, …)`
returns the SDK's raw result (typed `Any`) and returns error results instead of raising.
`KeyedClient.call_tool` *is* FastMCP's `Client.call_tool` — its client span, trace-context
`_meta`, multi-round-trip driving, output parsing into `.data`, `ToolError` on an error result
(unless `raise_on_error=False`) — with an `idempotencyKey` added to the `tools/call` it sends.

FastMCP's `Client` does not retry a failed call itself: the caller (your code, an agent
framework on top of it such as pydantic-ai) calls again. So the rule is `KeyedSession`'s: an
equal call after an attempt whose outcome is unknown (a timeout, a lost connection, a
cancellation) reuses that attempt's key; a definite answer (a result, a `ToolError`, another
refusal) makes the next equal call a new operation. `idempotency_key_in_progress` is waited out
inside `call_tool`. Every other attribute is the wrapped `Client`'s.
"""

from __future__ import annotations

import datetime
from typing import Any

from fastmcp import Client
from fastmcp.client.client import CallToolResult
from fastmcp.client.progress import ProgressHandler

from ..client.keyed_session import (
    DEFAULT_IN_PROGRESS_WAIT,
    DEFAULT_WINDOW,
    KeyedSession,
    KeyFor,
    RetryKeys,
)

__all__ = ["KeyedClient"]


class KeyedClient(KeyedSession):
    """A FastMCP 4.x `Client` whose `call_tool` and `call_tool_mcp` send keys.

    Options as for `KeyedSession` (`retry_keys`, `window`, `key_for`, `require_capability`,
    `in_progress_wait`). The key rule survives the client's reconnects: the keys live in this
    wrapper, and the key goes out on whichever session the client holds at the time.
    """

    wrapped: Client[Any]

    def __init__(
        self,
        client: Client[Any],
        *,
        retry_keys: RetryKeys | None = None,
        window: float = DEFAULT_WINDOW,
        key_for: KeyFor | None = None,
        require_capability: bool = True,
        in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT,
    ) -> None:
        if not isinstance(client, Client):
            raise TypeError(f"KeyedClient wraps a fastmcp.Client, got {type(client).__name__}")
        super().__init__(
            client,
            retry_keys=retry_keys,
            window=window,
            key_for=key_for,
            require_capability=require_capability,
            in_progress_wait=in_progress_wait,
        )

    async def call_tool(  # type: ignore[override]  # FastMCP's signature, not the SDK's
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        version: str | None = None,
        timeout: datetime.timedelta | float | int | None = None,
        progress_handler: ProgressHandler | None = None,
        raise_on_error: bool = True,
        meta: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> CallToolResult:
        """FastMCP's `Client.call_tool`, keyed (`idempotency_key=` overrides the rule)."""
        options: dict[str, Any] = {
            "version": version,
            "timeout": timeout,
            "progress_handler": progress_handler,
            "raise_on_error": raise_on_error,
            "meta": meta,
        }
        result: CallToolResult = await self._keyed(name, arguments, idempotency_key, options)
        return result

    async def call_tool_mcp(
        self,
        name: str,
        arguments: dict[str, Any],
        progress_handler: ProgressHandler | None = None,
        timeout: datetime.timedelta | float | int | None = None,
        meta: dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> Any:
        """FastMCP's `Client.call_tool_mcp` (the raw SDK result, errors returned), keyed."""
        options = {"progress_handler": progress_handler, "timeout": timeout, "meta": meta}
        return await self._keyed(name, arguments, idempotency_key, options, raw=True)

    async def _keyed(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        own: str | None,
        options: dict[str, Any],
        *,
        raw: bool = False,
    ) -> Any:
        key, op = self.choose_key(name, arguments, own)
        if raw:
            return await self.send(self.wrapped.call_tool_mcp, name, arguments, key, op, options)
        return await self.send(self.wrapped.call_tool, name, arguments, key, op, options)
