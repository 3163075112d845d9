"""The client half for mcp 1.x: send a keyed `tools/call` and read the server's capability.

Why a module of its own: a client must load no server code, so this is all
`idemtools.client` and `KeyedSession` need of the SDK, apart from the server adapter
(`mcp1.py`), the engine and the stores. Nothing is patched: the 1.x request params and
capability models keep unknown fields, so the key rides as an extra and the capability is read
from `model_extra`.
"""

from __future__ import annotations

from .._sdk import SDK2

# ruff: noqa: E402  (the assert comes first: mypy skips the rest of the file on the other line)
assert not SDK2, "the mcp 1.x client half: mypy checks it on the 1.x line only"

from datetime import timedelta
from typing import Any

from mcp import types
from mcp.shared.exceptions import McpError

from .._sdk.fields import WIRE_NAME

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
UNKNOWN_OUTCOME_CODES = frozenset({408, -32001, REQUEST_CANCELLED})
CONNECTION_CLOSED_CODES = frozenset({types.CONNECTION_CLOSED})


def observe_capabilities() -> None:
    """Nothing to do on 1.x: `ServerCapabilities.tools` keeps `idempotency` as an extra."""


def connected_unobserved(session: Any) -> bool:
    """Never on 1.x: the capability is kept whenever the session connected."""
    return False


def advertises(session: Any) -> bool:
    """Whether the connected server declared `capabilities.tools.idempotency`."""
    caps = session.get_server_capabilities()
    tools = caps.tools if caps is not None else None
    return tools is not None and (tools.model_extra or {}).get("idempotency") is not None


def with_key(request: Any, key: str) -> Any:
    """`request` (the SDK's `CallToolRequest`) with the key in its params (an extra on 1.x)."""
    params = request.params
    declared = "idempotency_key" in type(params).model_fields  # a server here may declare it
    params = params.model_copy(update={"idempotency_key" if declared else WIRE_NAME: key})
    return request.model_copy(update={"params": params})


async def send_call(
    session: Any, name: str, arguments: dict[str, Any] | None, key: str, read_timeout: float | None
) -> types.CallToolResult:
    """Send one keyed `tools/call`; `ClientSession.call_tool` cannot carry extra params.

    No patch needed: 1.x params keep unknown fields, so the key rides as an extra."""
    params = types.CallToolRequestParams.model_validate(
        {"name": name, "arguments": arguments, WIRE_NAME: key}
    )
    request = types.ClientRequest(types.CallToolRequest(method="tools/call", params=params))
    wait = timedelta(seconds=read_timeout) if read_timeout is not None else None
    result: types.CallToolResult = await session.send_request(
        request, types.CallToolResult, request_read_timeout_seconds=wait
    )
    return result


def rpc_error(exc: BaseException) -> tuple[int, str, object] | None:
    """(code, message, data) of a JSON-RPC error the client raised, else None."""
    if isinstance(exc, McpError):
        return exc.error.code, exc.error.message, exc.error.data
    return None


async def list_tools_page(session: Any, cursor: str | None) -> tuple[list[Any], str | None]:
    """One page of `tools/list`: (tools, next cursor). Sent raw: `list_tools` changed its
    signature within the 1.x line."""
    params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
    request = types.ClientRequest(types.ListToolsRequest(method="tools/list", params=params))
    result: types.ListToolsResult = await session.send_request(request, types.ListToolsResult)
    return list(result.tools), result.nextCursor
