"""The fixture tools on a Python MCP server (the server side of the contract; imports the SDK).

No `from __future__ import annotations` here: FastMCP and MCPServer read the tools' annotations
as objects, and these functions are defined inside `add`.

`sep3182_throw` answers a JSON-RPC error, which needs the SDK's own error exception to leave the
tool: mcp 2.x (MCPServer and the low-level `Server`) and the mcp 1.x low-level `Server` let it
through; mcp 1.x FastMCP turns every exception a tool raises into an `isError` result, so there
the fixture is not listed and the kit reports the checks that need it as blocked, naming it.
"""

import inspect
from typing import Any

import anyio

from .._sdk import SDK2
from ..errors import InstallError
from ..server.adapters import lowlevel_of
from ..server.installation import installation_of
from .contract import (
    COUNT,
    DESCRIPTIONS,
    FAIL,
    FIXTURE_TOOLS,
    RECORD,
    RECORD_SLOW,
    SCHEMAS,
    THROW,
    throw_error,
)
from .contract import answer_text as _text

if SDK2:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError
else:
    from mcp import types  # type: ignore[no-redef,unused-ignore]
    from mcp.shared.exceptions import McpError  # type: ignore[attr-defined,unused-ignore]

_SERVED = (*FIXTURE_TOOLS, THROW)

__all__ = ["add"]


class _Counters:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def record(self, label: str) -> int:
        self.counts[label] = self.counts.get(label, 0) + 1
        return self.counts[label]

    def get(self, label: str) -> int:
        return self.counts.get(label, 0)


def _result(label: str, executions: int, *, error: bool = False, pad: int = 0) -> Any:
    return types.CallToolResult.model_validate(
        {"content": [{"type": "text", "text": _text(label, executions, pad)}], "isError": error}
    )


async def _dispatch(counters: _Counters, name: str, arguments: dict[str, Any]) -> Any:
    label = arguments.get("label")
    if not isinstance(label, str):
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": "label: a string is required"}], "isError": True}
        )
    if name == COUNT:
        return _result(label, counters.get(label))
    executions = counters.record(label)
    if name == THROW:
        error = throw_error(label, executions)
        if SDK2:
            raise MCPError(error["code"], error["message"], error["data"])
        else:
            raise McpError(types.ErrorData.model_validate(error))
    if name == RECORD_SLOW:
        ms = arguments.get("ms") or 0
        await anyio.sleep(max(0, int(ms)) / 1000)
    pad = arguments.get("pad") if name == RECORD else 0
    return _result(label, executions, error=name == FAIL, pad=pad if type(pad) is int else 0)


def _tools() -> list[Any]:
    return [
        types.Tool.model_validate(
            {"name": name, "description": DESCRIPTIONS[name], "inputSchema": SCHEMAS[name]}
        )
        for name in _SERVED
    ]


def _add_high_level(server: Any, counters: _Counters) -> None:
    async def sep3182_record(label: str, payload: Any = None, pad: int = 0) -> types.CallToolResult:
        result = await _dispatch(counters, RECORD, {"label": label, "pad": pad})
        return result  # type: ignore[no-any-return]

    async def sep3182_record_slow(
        label: str, ms: int = 0, payload: Any = None
    ) -> types.CallToolResult:
        result = await _dispatch(counters, RECORD_SLOW, {"label": label, "ms": ms})
        return result  # type: ignore[no-any-return]

    async def sep3182_fail(label: str, payload: Any = None) -> types.CallToolResult:
        return await _dispatch(counters, FAIL, {"label": label})  # type: ignore[no-any-return]

    async def sep3182_count(label: str) -> types.CallToolResult:
        return await _dispatch(counters, COUNT, {"label": label})  # type: ignore[no-any-return]

    async def sep3182_throw(label: str, payload: Any = None) -> types.CallToolResult:
        return await _dispatch(counters, THROW, {"label": label})  # type: ignore[no-any-return]

    tools: list[Any] = [sep3182_record, sep3182_record_slow, sep3182_fail, sep3182_count]
    if SDK2:  # mcp 1.x FastMCP would answer the error as an isError result: not listed there
        tools.append(sep3182_throw)
    for fn in tools:
        server.add_tool(fn, name=fn.__name__, description=DESCRIPTIONS[fn.__name__])


if SDK2:

    def _add_lowlevel2(server: Any, counters: _Counters) -> None:
        previous_list = server.get_request_handler("tools/list")
        previous_call = server.get_request_handler("tools/call")

        async def list_tools(ctx: Any, params: Any) -> Any:
            tools = _tools()
            if previous_list is not None:
                theirs = await previous_list.handler(ctx, params)
                return theirs.model_copy(update={"tools": [*theirs.tools, *tools]})
            return types.ListToolsResult(tools=tools)

        async def call_tool(ctx: Any, params: Any) -> Any:
            if params.name in _SERVED:
                return await _dispatch(counters, params.name, dict(params.arguments or {}))
            if previous_call is None:
                return types.CallToolResult.model_validate(
                    {
                        "content": [{"type": "text", "text": f"unknown tool {params.name}"}],
                        "isError": True,
                    }
                )
            return await previous_call.handler(ctx, params)

        list_type = previous_list.params_type if previous_list else types.PaginatedRequestParams
        call_type = previous_call.params_type if previous_call else types.CallToolRequestParams
        server.add_request_handler("tools/list", list_type, list_tools)
        server.add_request_handler("tools/call", call_type, call_tool)

else:

    def _add_lowlevel1(server: Any, counters: _Counters) -> None:
        if installation_of(server) is not None:
            raise InstallError(
                "add_fixture_tools: on an mcp 1.x low-level Server, call it before "
                "idemtools.install()"
            )
        handlers = server.request_handlers
        previous_list = handlers.get(types.ListToolsRequest)
        previous_call = handlers.get(types.CallToolRequest)

        async def list_tools(req: Any) -> Any:
            tools = _tools()
            if previous_list is not None:
                theirs = (await previous_list(req)).root
                tools = [*theirs.tools, *tools]
            return types.ServerResult(types.ListToolsResult(tools=tools))

        async def call_tool(req: Any) -> Any:
            if req.params.name in _SERVED:
                result = await _dispatch(
                    counters, req.params.name, dict(req.params.arguments or {})
                )
                return types.ServerResult(result)
            if previous_call is None:
                text = f"unknown tool {req.params.name}"
                return types.ServerResult(
                    types.CallToolResult.model_validate(
                        {"content": [{"type": "text", "text": text}], "isError": True}
                    )
                )
            return await previous_call(req)

        handlers[types.ListToolsRequest] = list_tools
        handlers[types.CallToolRequest] = call_tool


class _Fastmcp4:
    """Standalone FastMCP 4.x: `add_tool(tool)` takes a Tool only; `tool(fn, name=...)` builds
    one from a function, with the same keywords FastMCP (mcp 1.x) and MCPServer take.

    `sep3182_throw` is not listed here: FastMCP 4 turns an MCPError a tool raises into an
    `isError` result (as mcp 1.x FastMCP does), so it could not answer a JSON-RPC error; the kit
    reports the checks that need it as blocked and names the fixture.
    """

    def __init__(self, server: Any) -> None:
        self.server = server

    def add_tool(self, fn: Any, **options: Any) -> None:
        if options.get("name", getattr(fn, "__name__", None)) == "sep3182_throw":
            return
        self.server.tool(fn, **options)


def _takes_name(add_tool: Any) -> bool:
    """FastMCP (mcp 1.x) and MCPServer (mcp 2.x) take `add_tool(fn, name=...)`."""
    try:
        return "name" in inspect.signature(add_tool).parameters
    except (TypeError, ValueError):
        return True


def add(server: Any) -> None:
    counters = _Counters()
    lowlevel = lowlevel_of(server)
    if lowlevel is not None and lowlevel is not server and hasattr(server, "add_tool"):
        _add_high_level(server if _takes_name(server.add_tool) else _Fastmcp4(server), counters)
    elif SDK2 and hasattr(server, "add_request_handler"):
        _add_lowlevel2(server, counters)
    elif not SDK2 and isinstance(getattr(server, "request_handlers", None), dict):
        _add_lowlevel1(server, counters)
    else:
        raise InstallError(
            f"add_fixture_tools cannot add tools to {type(server).__name__}: expected FastMCP or "
            "the low-level Server (mcp 1.x), MCPServer or the low-level Server (mcp 2.x), or "
            "standalone FastMCP 4.x"
        )
