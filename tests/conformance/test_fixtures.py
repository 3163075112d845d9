"""`add_fixture_tools` on every supported server type, both SDK lines (in-memory, raw JSON-RPC)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import idemtools
from idemtools import InstallError
from idemtools.conformance import FIXTURE_TOOLS, add_fixture_tools
from idemtools.conformance.contract import (
    SCHEMAS,
    THROW,
    THROW_CODE,
    executions_of,
    throw_count,
)
from idemtools.server.adapters import SDK2

from ..e2e.harness import LINE, memory_wire

if SDK2:
    import mcp_types as types
else:
    from mcp import types


class _App:
    def __init__(self, server: Any) -> None:
        self.server = server


def _high_level() -> Any:
    if SDK2:
        from mcp.server.mcpserver import MCPServer

        server: Any = MCPServer("fixtures")
    else:
        from mcp.server.fastmcp import FastMCP

        server = FastMCP("fixtures")

    @server.tool()
    async def theirs(x: int) -> str:
        return f"theirs {x}"

    return server


def _low_level() -> Any:
    """A low-level server that already has a tool of its own, `theirs`."""
    from mcp.server.lowlevel import Server

    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    if SDK2:

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=[types.Tool(name="theirs", input_schema=schema)])

        async def call_tool(ctx: Any, params: Any) -> Any:
            text = f"theirs {params.arguments['x']}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        return Server("low", on_list_tools=list_tools, on_call_tool=call_tool)
    server = Server("low")

    @server.list_tools()  # type: ignore[misc,no-untyped-call]
    async def list_tools1() -> list[Any]:
        return [types.Tool(name="theirs", inputSchema=schema)]

    @server.call_tool()  # type: ignore[misc]
    async def call_tool1(name: str, arguments: dict[str, Any]) -> list[Any]:
        return [types.TextContent(type="text", text=f"theirs {arguments['x']}")]

    return server


def _text(reply: dict[str, Any]) -> str:
    return " ".join(b.get("text", "") for b in reply["result"]["content"])


@pytest.mark.parametrize("kind", ["high-level", "low-level"])
async def test_fixture_tools_follow_the_contract(kind: str) -> None:
    server = _high_level() if kind == "high-level" else _low_level()
    add_fixture_tools(server)
    idemtools.install(server)
    async with memory_wire(_App(server)) as wire:  # type: ignore[arg-type]
        assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}
        listed = (await wire.request("tools/list", {}))["result"]["tools"]
        names = [t["name"] for t in listed]
        assert set(FIXTURE_TOOLS) <= set(names) and "theirs" in names
        for tool in listed:
            if tool["name"] in FIXTURE_TOOLS:
                assert "label" in tool["inputSchema"]["properties"]
                assert set(tool["inputSchema"]["properties"]) <= set(
                    SCHEMAS[tool["name"]]["properties"]
                )

        async def call(name: str, args: dict[str, Any], key: str | None = None) -> Any:
            params: dict[str, Any] = {"name": name, "arguments": args}
            if key:
                params["idempotencyKey"] = key
            return await wire.call(params)

        one = await call("sep3182_record", {"label": "a", "payload": {"any": [1, "json"]}})
        two = await call("sep3182_record", {"label": "a"})
        assert [executions_of(r["result"]) for r in (one, two)] == [1, 2]
        assert json.loads(_text(one)) == {"label": "a", "executions": 1}
        failed = await call("sep3182_fail", {"label": "a"})
        assert failed["result"]["isError"] is True and executions_of(failed["result"]) == 3
        slow = await call("sep3182_record_slow", {"label": "b", "ms": 1})
        assert executions_of(slow["result"]) == 1
        keyed = [await call("sep3182_record", {"label": "c"}, "k-1") for _ in range(2)]
        assert keyed[0]["result"] == keyed[1]["result"]  # the server's default policy applies
        count = await call("sep3182_count", {"label": "a"})
        assert executions_of(count["result"]) == 3
        assert executions_of((await call("sep3182_count", {"label": "c"}))["result"]) == 1
        assert _text(await call("theirs", {"x": 4})) == "theirs 4"  # their tools still work
        # sep3182_throw: on every server type but mcp 1.x FastMCP (whose tools cannot answer a
        # JSON-RPC error), counted, a JSON-RPC error with data, and replayed under a key.
        if LINE == 1 and kind == "high-level":
            assert THROW not in names
            return
        assert THROW in names
        thrown = [await call(THROW, {"label": "t"}, "k-throw") for _ in range(2)]
        assert "result" not in thrown[0], thrown[0]
        error = thrown[0]["error"]
        assert error["code"] == THROW_CODE and not -32768 <= error["code"] <= -32000
        assert error["data"] == {"label": "t", "executions": 1} and throw_count(error) == 1
        assert thrown[1]["error"] == error  # replayed by the server's default policy
        assert executions_of((await call("sep3182_count", {"label": "t"}))["result"]) == 1
        unkeyed = await call(THROW, {"label": "t"})
        assert throw_count(unkeyed["error"]) == 2


async def test_counters_belong_to_one_server() -> None:
    first, second = _high_level(), _high_level()
    add_fixture_tools(first)
    add_fixture_tools(second)
    async with memory_wire(_App(first)) as a, memory_wire(_App(second)) as b:  # type: ignore[arg-type]
        params = {"name": "sep3182_record", "arguments": {"label": "x"}}
        assert executions_of((await a.call(params))["result"]) == 1
        assert executions_of((await b.call(params))["result"]) == 1


@pytest.mark.skipif(LINE != 1, reason="mcp 1.x low-level: one tools/call handler entry")
def test_lowlevel1_after_install_is_refused() -> None:
    server = _low_level()
    idemtools.install(server)
    with pytest.raises(InstallError, match=r"before idemtools\.install"):
        add_fixture_tools(server)


def test_unsupported_object_is_refused() -> None:
    with pytest.raises(InstallError, match="cannot add tools"):
        add_fixture_tools(object())
