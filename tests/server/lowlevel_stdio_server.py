"""A low-level `Server` on stdio with no store, for the default-store tests: one keyed tool.

    python tests/server/lowlevel_stdio_server.py LEDGER declared|undeclared

`declared`: `server.run()` inside `idemtools.local_transport("stdio")`, as the docs show for a
low-level server; `undeclared`: the same `run()` over the SDK's `stdio_server`, nothing said.
Every execution of `work` appends a line to LEDGER, so a test counts executions across processes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

import idemtools
from idemtools import idempotent, shared
from idemtools._sdk import SDK2

if SDK2:
    import mcp_types as types
else:
    from mcp import types  # type: ignore[no-redef]


def build(ledger: str) -> Any:
    @idempotent(name="work", scope=shared, retention=600)
    def work(label: str) -> str:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{label}\n".encode())
        finally:
            os.close(fd)
        return f"done {label} pid {os.getpid()}"

    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    tools = [types.Tool.model_validate({"name": "work", "inputSchema": schema})]

    if SDK2:

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=tools)

        async def call(ctx: Any, params: Any) -> Any:
            text = work(**dict(params.arguments or {}))
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        server: Any = Server("lowlevel-stdio", on_list_tools=list_tools, on_call_tool=call)
    else:
        server = Server("lowlevel-stdio")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools_1() -> list[Any]:
            return tools

        @server.call_tool()  # type: ignore[misc,no-untyped-call]
        async def call_1(name: str, arguments: dict[str, Any]) -> Any:
            return [types.TextContent(type="text", text=work(**arguments))]

    idemtools.install(server)  # no store: the default for the transport it serves
    return server


async def main(ledger: str, mode: str) -> None:
    server = build(ledger)
    declared = (
        idemtools.local_transport("stdio") if mode == "declared" else contextlib.nullcontext()
    )
    async with stdio_server() as (read, write):
        with declared:
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2])
