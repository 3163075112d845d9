"""A keyed call to a tool that does not exist executed nothing: answered, never recorded.

So a rolling deploy that adds the tool later does not replay "Unknown tool" for a retention
window: the retry with the same key runs the tool (docs/contract.md, Failure paths).
"""

from __future__ import annotations

from typing import Any

import idemtools
from idemtools.server.adapters import SDK2

from .harness import make_app, memory_wire, result_text, types

PARAMS = {"name": "refund", "arguments": {"amount": 7}, "idempotencyKey": "k-unknown"}


async def test_unknown_tool_is_answered_not_recorded_and_runs_once_deployed() -> None:
    app = make_app()
    async with memory_wire(app) as wire:
        unknown = await wire.call(PARAMS)
        again = await wire.call(PARAMS)  # still unknown: answered again, nothing recorded

        @app.server.tool()
        async def refund(amount: int) -> str:
            app.runs.append(("refund", amount))
            return f"refunded {amount}"

        deployed = await wire.call(PARAMS)
        replay = await wire.call(PARAMS)
    assert "Unknown tool" in result_text(unknown) and unknown["result"].get("isError")
    assert again == {**unknown, "id": again["id"]}
    assert result_text(deployed) == "refunded 7" and not deployed["result"].get("isError")
    assert replay["result"] == deployed["result"]
    assert app.count("refund") == 1
    assert app.installation.engine.stats.replays == 1


# -- low-level servers: the handler decides; idemtools reads its tools/list -----------------------


def _lowlevel(tools: dict[str, Any], runs: list[str]) -> Any:
    """A low-level server serving `tools` (name → text), answering unknown names as the SDK's
    own servers do: an `isError` result, "Unknown tool: <name>"."""
    schema = {"type": "object"}
    if SDK2:
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            listed = [types.Tool(name=n, input_schema=schema) for n in tools]
            return types.ListToolsResult(tools=listed)

        async def call_tool(ctx: Any, params: Any) -> Any:
            if params.name not in tools:
                text = types.TextContent(type="text", text=f"Unknown tool: {params.name}")
                return types.CallToolResult(content=[text], is_error=True)
            runs.append(params.name)
            text = types.TextContent(type="text", text=tools[params.name])
            return types.CallToolResult(content=[text])

        return Server("low", on_list_tools=list_tools, on_call_tool=call_tool)

    else:
        from mcp.server.lowlevel import Server as Server1

        server = Server1("low")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools1() -> list[Any]:
            return [types.Tool(name=n, inputSchema=schema) for n in tools]

        @server.call_tool()  # type: ignore[misc]
        async def call_tool1(name: str, arguments: dict[str, Any]) -> list[Any]:
            if name not in tools:
                raise ValueError(f"Unknown tool: {name}")
            runs.append(name)
            return [types.TextContent(type="text", text=tools[name])]

        return server


class _LowApp:
    def __init__(self, server: Any) -> None:
        self.server = server


async def test_lowlevel_unknown_tool_is_not_recorded() -> None:
    runs: list[str] = []
    tools: dict[str, Any] = {}
    server = _lowlevel(tools, runs)
    installation = idemtools.install(server)
    async with memory_wire(_LowApp(server)) as wire:  # type: ignore[arg-type]
        unknown = await wire.call(PARAMS)
        tools["refund"] = "refunded"  # the new release lists and serves it
        deployed = await wire.call(PARAMS)
        replay = await wire.call(PARAMS)
    assert "Unknown tool" in result_text(unknown)
    assert result_text(deployed) == "refunded" and replay["result"] == deployed["result"]
    assert runs == ["refund"]
    assert installation.engine.stats.replays == 1


async def test_lowlevel_listed_tool_error_is_still_recorded() -> None:
    # An error answer from a tool the server lists may follow a side effect: recorded.
    runs: list[str] = []
    server = _lowlevel({"refund": "refunded"}, runs)
    installation = idemtools.install(server)
    params = {**PARAMS, "name": "refund"}
    async with memory_wire(_LowApp(server)) as wire:  # type: ignore[arg-type]
        await wire.call(params)
        await wire.call(params)
    assert runs == ["refund"] and installation.engine.stats.replays == 1
