"""Keys from LangChain's MCP tools (`langchain-mcp-adapters`, on mcp 1.x): `KeyedToolCalls`.

    from langchain_mcp_adapters.client import MultiServerMCPClient
    from idemtools.integrations.langchain import KeyedToolCalls

    connections = {"payments": {"transport": "streamable_http", "url": url}}
    client = MultiServerMCPClient(connections, tool_interceptors=[KeyedToolCalls(connections)])
    tools = await client.get_tools()        # into a LangGraph ToolNode, with a retry policy

The framework's retry path (read in langchain-mcp-adapters 0.3 and LangGraph 1.2): the adapters
turn each MCP tool into a LangChain tool that, by default, opens a fresh `ClientSession` per
call; a LangGraph `RetryPolicy` on the tool node re-runs the node after an exception, and so
re-invokes the *same* tool call, with the same `tool_call_id`. The retry goes out on yet
another fresh session.

The rule here: the key derives from that tool call's identity — the LangGraph thread id and the
`tool_call_id` — under a random per-interceptor namespace, because `tool_call_id`s restart per
conversation (two threads' `call_1` must not collide). A tool call made outside a graph (no
runtime) falls back to `KeyedSession`'s rule. Pass `namespace=` (stable across processes) when a
graph resumed in another process must reuse its keys.

How the key is sent: the interceptor opens the session itself (the adapters' own
`create_session` for the call's connection, its headers overrides applied) and calls through a
`KeyedSession`, instead of the adapters' unkeyed session-per-call. Without `connections` (tools
loaded from a session you pass, `load_mcp_tools(KeyedSession(session))`), it lets that session
send the derived key.

`idempotency_outcome_unknown` (the server or a proxy's upstream died mid-call) is raised as
`OutcomeUnknownError`; a graph's retry of that same tool call gets the same error without
anything being sent: whether the tool ran is unknown for good, and only the application decides
to act again (a new tool call, so a new key).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from langchain_mcp_adapters.interceptors import MCPToolCallRequest  # type: ignore[import-not-found,unused-ignore]  # an optional extra
from langchain_mcp_adapters.sessions import create_session  # type: ignore[import-not-found,unused-ignore]  # an optional extra

from ..client.keyed_session import (
    DEFAULT_IN_PROGRESS_WAIT,
    DEFAULT_WINDOW,
    KeyedSession,
    RetryKeys,
    operation,
)
from ..errors import OutcomeUnknownError

__all__ = ["KeyedToolCalls"]

_HTTP = ("sse", "http", "streamable_http", "streamable-http")
_MAX_SETTLED = 1024


def _tool_call_key(runtime: object | None) -> tuple[str, str] | None:
    """(thread id, tool-call id) of the LangGraph tool call behind this request, if any."""
    tool_call_id = getattr(runtime, "tool_call_id", None)
    if not isinstance(tool_call_id, str) or not tool_call_id:
        return None
    config = getattr(runtime, "config", None) or {}
    configurable = config.get("configurable", {}) if isinstance(config, Mapping) else {}
    thread = configurable.get("thread_id") if isinstance(configurable, Mapping) else None
    return str(thread) if thread is not None else "", tool_call_id


class KeyedToolCalls:
    """A `langchain-mcp-adapters` tool interceptor that sends one key per LangGraph tool call.

    Args:
        connections: the connections given to `MultiServerMCPClient` (by server name); the
            interceptor opens each call's session itself. None: the tools were loaded from a
            session, which must be a `KeyedSession`.
        namespace: prefix of every derived key (default: random, per interceptor).
        window: as for `KeyedSession`.
        require_capability: as for `KeyedSession`.
        in_progress_wait: as for `KeyedSession`.
    """

    def __init__(
        self,
        connections: Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        window: float = DEFAULT_WINDOW,
        require_capability: bool = True,
        in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT,
    ) -> None:
        self.connections = dict(connections) if connections is not None else None
        self.namespace = namespace if namespace is not None else uuid.uuid4().hex
        self.retry_keys = RetryKeys(window)
        self.require_capability = require_capability
        self.in_progress_wait = in_progress_wait
        # Tool calls answered `idempotency_outcome_unknown`: a graph's retry of one is answered
        # with the same error, unsent (only the application decides to act again).
        self._settled: dict[str, OutcomeUnknownError] = {}

    def key_of(self, request: MCPToolCallRequest) -> str | None:
        """The derived key of this request's tool call; None outside a graph (the rule then)."""
        identity = _tool_call_key(request.runtime)
        if identity is None:
            return None
        thread, tool_call_id = identity
        return f"lc:{self.namespace}:{len(thread)}:{thread}:{tool_call_id}"

    async def __call__(
        self,
        request: MCPToolCallRequest,
        handler: Callable[[MCPToolCallRequest], Awaitable[Any]],
    ) -> Any:
        key = self.key_of(request)
        if key is not None and key in self._settled:
            raise self._settled[key]
        try:
            return await self._call(request, handler, key)
        except OutcomeUnknownError as exc:
            if key is not None:
                if len(self._settled) >= _MAX_SETTLED:
                    del self._settled[next(iter(self._settled))]
                self._settled[key] = exc
            raise

    async def _call(
        self,
        request: MCPToolCallRequest,
        handler: Callable[[MCPToolCallRequest], Awaitable[Any]],
        key: str | None,
    ) -> Any:
        connection = (self.connections or {}).get(request.server_name)
        if connection is None:
            if self.connections is not None:
                raise KeyError(
                    f"KeyedToolCalls has no connection named {request.server_name!r}; pass "
                    "it the same connections as MultiServerMCPClient"
                )
            with operation(self.retry_keys, request.name, request.args, key=key):
                return await handler(request)
        if request.headers and connection.get("transport") in _HTTP:
            connection = {
                **connection,
                "headers": {**connection.get("headers", {}), **request.headers},
            }
        failure: BaseException | None = None
        async with create_session(cast("Any", connection)) as session:
            await session.initialize()
            keyed = KeyedSession(
                session,
                retry_keys=self.retry_keys,
                require_capability=self.require_capability,
                in_progress_wait=self.in_progress_wait,
            )
            try:
                return await keyed.call_tool(request.name, request.args, idempotency_key=key)
            except Exception as exc:
                # Raised outside the session, as the adapters do: the SDK's session teardown
                # can swallow an exception raised inside it.
                failure = exc
        assert failure is not None
        raise failure
