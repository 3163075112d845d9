"""The client half for mcp 2.x: send a keyed `tools/call` and read the server's capability.

Why a module of its own: a client (an agent, a FastMCP `Client`) must load no server code, so
this is all `idemtools.client` and `KeyedSession` need of the SDK, apart from the server adapter
(`mcp2.py`), the engine and the stores.

Nothing here changes a model a server uses. The key rides on client-only subclasses of the SDK's
`CallToolRequestParams` / `CallToolRequest`, and the capability (which the SDK's
`ToolsCapability` drops, having no such field) is read through `ClientSession` alone:
`observe_capabilities()` (applied once, listed by `patches.applied_patches()`) parses the
`initialize` answer into a client-only subclass of `InitializeResult`, and notes what a
`server/discover` answer declared. `mcp_types.ToolsCapability`, `ServerCapabilities` and
`CallToolRequestParams` stay exactly as the SDK ships them.
"""

from __future__ import annotations

from .._sdk import SDK2

# ruff: noqa: E402  (the assert comes first: mypy skips the rest of the file on the other line)
assert SDK2, "the mcp 2.x client half: mypy checks it on the 2.x line only"

import functools
import weakref
from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import Field

from .._sdk.fields import WIRE_NAME
from .._sdk.registry import record_patch as record_client_patch

__all__ = [
    "CONNECTION_CLOSED_CODES",
    "UNKNOWN_OUTCOME_CODES",
    "advertises",
    "connected_unobserved",
    "list_tools_page",
    "observe_capabilities",
    "rpc_error",
    "send_call",
    "with_key",
]

# The answer was lost and the call may have run (a timeout; -32800 "Request cancelled", which an
# mcp 2.x server sends to a 2025-era request while its execution goes on): same key again.
REQUEST_CANCELLED = -32800
UNKNOWN_OUTCOME_CODES = frozenset({408, types.REQUEST_TIMEOUT, REQUEST_CANCELLED})
CONNECTION_CLOSED_CODES = frozenset({types.CONNECTION_CLOSED})


# -- the capability ------------------------------------------------------------------------------


class _ToolsCapability(types.ToolsCapability):
    idempotency: dict[str, Any] | None = None


class _ServerCapabilities(types.ServerCapabilities):
    tools: _ToolsCapability | None = None


class _InitializeResult(types.InitializeResult):
    """What `ClientSession.initialize` parses into once observed: the SDK's result, plus
    `capabilities.tools.idempotency` (serialized only when the server sent it)."""

    capabilities: _ServerCapabilities


_DISCOVERED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()
"""Session → whether its last `server/discover` answer declared the capability (2026 era)."""


def _declares(raw: object) -> bool:
    caps = raw.get("capabilities") if isinstance(raw, dict) else None
    tools = caps.get("tools") if isinstance(caps, dict) else None
    return isinstance(tools, dict) and tools.get("idempotency") is not None


def observe_capabilities() -> None:
    """Let every `ClientSession` keep `capabilities.tools.idempotency` (once per process).

    A client class only: `send_request` parses an `initialize` answer into `_InitializeResult`
    (a subclass, so everything that reads the SDK's type still works), and `send_discover`
    notes whether the answer declared it. Call it before connecting.
    """
    if not record_client_patch(
        "client_capability",
        "mcp.client.session.ClientSession: initialize/discover answers keep "
        "capabilities.tools.idempotency (client side only)",
    ):
        return
    send_request = ClientSession.send_request
    send_discover = ClientSession.send_discover

    @functools.wraps(send_request)
    async def observed_send_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        if args and args[0] is types.InitializeResult:
            args = (_InitializeResult, *args[1:])
        elif kwargs.get("result_type") is types.InitializeResult:
            kwargs["result_type"] = _InitializeResult
        return await send_request(self, request, *args, **kwargs)

    @functools.wraps(send_discover)
    async def observed_send_discover(self: Any, *args: Any, **kwargs: Any) -> Any:
        raw = await send_discover(self, *args, **kwargs)
        _DISCOVERED[self] = _declares(raw)
        return raw

    setattr(ClientSession, "send_request", observed_send_request)  # noqa: B010
    setattr(ClientSession, "send_discover", observed_send_discover)  # noqa: B010


def advertises(session: Any) -> bool:
    """Whether the connected server declared `capabilities.tools.idempotency`."""
    caps = getattr(session, "server_capabilities", None)
    if caps is None:
        return False
    if getattr(session, "discover_result", None) is not None:
        return _DISCOVERED.get(session, False)
    return getattr(caps.tools, "idempotency", None) is not None


def connected_unobserved(session: Any) -> bool:
    """The session connected before `observe_capabilities()`: the SDK parsed its `initialize`
    answer into its own `ToolsCapability`, which dropped `idempotency` for good."""
    caps = getattr(session, "server_capabilities", None)
    if caps is None or getattr(session, "discover_result", None) is not None:
        return False
    return not isinstance(caps, _ServerCapabilities)


# -- the key -------------------------------------------------------------------------------------


@functools.cache
def _keyed_request_models() -> tuple[Any, Any]:
    """`CallToolRequestParams` / `CallToolRequest` subclasses that carry `idempotencyKey`."""

    class KeyedParams(types.CallToolRequestParams):
        idempotency_key: str | None = Field(default=None, alias="idempotencyKey")

    class KeyedRequest(types.CallToolRequest):
        params: KeyedParams

    return KeyedParams, KeyedRequest


def with_key(request: Any, key: str) -> Any:
    """`request` (the SDK's `CallToolRequest`) as a keyed request, its other fields as they are.

    Built without validation from the fields the SDK already validated."""
    params_cls, request_cls = _keyed_request_models()
    params = request.params
    values = {
        name: getattr(params, name)
        for name in params_cls.model_fields
        if name != "idempotency_key" and name in type(params).model_fields
    }
    keyed = params_cls.model_construct(
        _fields_set={*params.model_fields_set, "idempotency_key"}, idempotency_key=key, **values
    )
    rest = {
        name: getattr(request, name)
        for name in request_cls.model_fields
        if name != "params" and name in type(request).model_fields
    }
    return request_cls.model_construct(
        _fields_set={*request.model_fields_set, "params"}, params=keyed, **rest
    )


async def send_call(
    session: Any, name: str, arguments: dict[str, Any] | None, key: str, read_timeout: float | None
) -> types.CallToolResult:
    """Send one keyed `tools/call`; `call_tool` cannot carry extra params."""
    session = getattr(session, "session", session)  # a `Client` holds its ClientSession
    params_cls, request_cls = _keyed_request_models()
    params = params_cls.model_validate(
        {"name": name, "arguments": arguments, WIRE_NAME: key}, by_name=False
    )
    result: types.CallToolResult = await session.send_request(
        request_cls(params=params),
        types.CallToolResult,
        request_read_timeout_seconds=read_timeout,
    )
    return result


def rpc_error(exc: BaseException) -> tuple[int, str, object] | None:
    """(code, message, data) of a JSON-RPC error the client raised, else None."""
    if isinstance(exc, MCPError):
        return exc.error.code, exc.error.message, exc.error.data
    return None


async def list_tools_page(session: Any, cursor: str | None) -> tuple[list[Any], str | None]:
    """One page of `tools/list`: (tools, next cursor)."""
    session = getattr(session, "session", session)  # a `Client` holds its ClientSession
    result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
    return list(result.tools), result.next_cursor
