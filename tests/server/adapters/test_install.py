"""install(): server kinds, refusing unsafe states, re-registration, the declared field."""

from __future__ import annotations

from typing import Any

import pytest

import idemtools
from idemtools import InstallError
from idemtools.server.adapters import SDK2
from tests.e2e.harness import LINE, error_type, make_app, memory_wire, result_text, types


def test_install_twice_is_refused() -> None:
    app = make_app()
    with pytest.raises(InstallError, match="already installed"):
        idemtools.install(app.server)


def test_unsupported_object_is_refused() -> None:
    with pytest.raises(InstallError, match="cannot install"):
        idemtools.install(object())


def test_declared_field_is_typed_and_reaches_the_wire() -> None:
    params = types.CallToolRequestParams.model_validate(
        {"name": "t", "arguments": {}, "idempotencyKey": "k-typed"}
    )
    assert params.idempotency_key == "k-typed"  # type: ignore[attr-defined]
    request = types.CallToolRequest(method="tools/call", params=params)
    dumped = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert dumped["params"]["idempotencyKey"] == "k-typed"
    assert "idempotency_key" not in dumped["params"]


def test_installation_lists_tools_with_their_policies() -> None:
    import anyio

    app = make_app()
    tools = {t.name: t for t in anyio.run(app.installation.tools)}
    assert {"charge", "slow", "plain", "echo"} <= set(tools)
    assert tools["charge"].own and not tools["plain"].own
    assert tools["slow"].policy.lease == 5
    assert tools["plain"].policy == app.installation.engine.default_policy
    assert idemtools.installation_of(app.server) is app.installation
    # the input schema the server lists, for the docs' example request
    schema = tools["charge"].input_schema
    assert schema is not None and schema["required"] == ["amount"]
    assert set(schema["properties"]) == {"amount", "currency"}


def _lowlevel_server(runs: list[int], *, register: bool = True) -> Any:
    """A low-level server of the installed line with one tool, `add`."""
    if SDK2:
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
            return types.ListToolsResult(tools=[types.Tool(name="add", input_schema=schema)])

        async def call_tool(ctx: Any, params: Any) -> Any:
            runs.append(params.arguments["x"])
            text = types.TextContent(type="text", text=f"added {params.arguments['x']}")
            return types.CallToolResult(content=[text])

        if register:
            return Server("low", on_list_tools=list_tools, on_call_tool=call_tool)
        return Server("low", on_list_tools=list_tools)

    else:
        from mcp.server.lowlevel import Server as Server1

        server = Server1("low")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools1() -> list[Any]:
            schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
            return [types.Tool(name="add", inputSchema=schema)]

        if register:
            _register_call_tool1(server, runs)
        return server


def _register_call_tool1(server: Any, runs: list[int]) -> None:
    @server.call_tool()  # type: ignore[misc]
    async def call_tool1(name: str, arguments: dict[str, Any]) -> list[Any]:
        runs.append(arguments["x"])
        return [types.TextContent(type="text", text=f"added {arguments['x']}")]


class _LowApp:
    def __init__(self, server: Any) -> None:
        self.server = server


async def _twice(server: Any, key: str = "k-low") -> tuple[dict[str, Any], dict[str, Any]]:
    async with memory_wire(_LowApp(server)) as wire:  # type: ignore[arg-type]
        assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}
        params = {"name": "add", "arguments": {"x": 2}, "idempotencyKey": key}
        return await wire.call(params), await wire.call(params)


async def test_lowlevel_server() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs)
    installation = idemtools.install(server)
    assert installation.adapter == f"mcp{LINE}.lowlevel"
    first, again = await _twice(server)
    assert result_text(first) == "added 2" and again["result"] == first["result"]
    assert runs == [2]
    if LINE == 1:  # its tools/list handler is asked; on mcp 2.x the handler is opaque
        (tool,) = await installation.tools()
        assert tool.input_schema == {"type": "object", "properties": {"x": {"type": "integer"}}}


@pytest.mark.skipif(LINE != 1, reason="mcp 1.x registers tools/call handlers after construction")
async def test_install_before_the_handler_exists_still_protects() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs, register=False)
    idemtools.install(server)
    _register_call_tool1(server, runs)  # registered after install: wrapped by the guard
    await _twice(server)
    assert runs == [2]


@pytest.mark.skipif(LINE != 1, reason="mcp 1.x handler dict")
async def test_reregistered_handler_is_wrapped_again() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs)
    idemtools.install(server)
    _register_call_tool1(server, runs)  # re-registration through the SDK
    await _twice(server, "k-a")
    server.request_handlers = dict(server.request_handlers)  # wholesale replacement
    raw = server.request_handlers[types.CallToolRequest].__wrapped__
    server.request_handlers[types.CallToolRequest] = raw  # now unprotected...
    assert not hasattr(server.request_handlers[types.CallToolRequest], "__wrapped__")
    await _twice(server, "k-b")  # ...until initialize re-guards it, before any call runs
    assert runs == [2, 2]


@pytest.mark.skipif(LINE != 2, reason="mcp 2.x middleware chain")
async def test_removed_middleware_is_put_back_at_initialize() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs)
    idemtools.install(server)
    server.middleware = [m for m in server.middleware if "Idempotency" not in type(m).__name__]
    await _twice(server)
    assert runs == [2]


@pytest.mark.skipif(LINE != 2, reason="mcp 2.x handler registry")
async def test_replaced_call_handler_stays_protected() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs)
    idemtools.install(server)

    async def other(ctx: Any, params: Any) -> Any:
        runs.append(-params.arguments["x"])
        return types.CallToolResult(content=[types.TextContent(type="text", text="other")])

    server.add_request_handler("tools/call", types.CallToolRequestParams, other)
    await _twice(server)
    assert runs == [-2]


async def test_custom_error_codes_and_replay_marker() -> None:
    codes = idemtools.ErrorCodes(idempotency_key_conflict=-32099)
    app = make_app(codes=codes, mark_replays=True)
    async with memory_wire(app) as wire:
        params = {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-m"}
        first = await wire.call(params)
        again = await wire.call(params)
        conflict = await wire.call({**params, "arguments": {"amount": 2}})
    assert (
        "_meta" not in first["result"]
        or "io.github.idemtools/replayed" not in first["result"]["_meta"]
    )
    assert again["result"]["_meta"]["io.github.idemtools/replayed"] is True
    assert conflict["error"]["code"] == -32099
    assert error_type(conflict) == "idempotency_key_conflict"
