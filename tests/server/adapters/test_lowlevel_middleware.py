"""mcp 2.x low-level `Server`: a server middleware that authorizes runs before every replay,
whether it was added before or after `install()` (docs/contract.md,
Authorization), as on FastMCP."""

from __future__ import annotations

from typing import Any

import pytest

import idemtools
from idemtools import Policy, shared
from tests.e2e.harness import LINE, App, memory_wire

pytestmark = pytest.mark.skipif(LINE != 2, reason="the server middleware chain is mcp 2.x only")


class Revocable:
    """A deployment's authorization middleware: `invoice` is allowed while `allowed`."""

    def __init__(self) -> None:
        self.allowed = True

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call" and not self.allowed:
            from mcp.shared.exceptions import MCPError  # type: ignore[attr-defined]

            raise MCPError(-32003, "revoked by policy")
        return await call_next(ctx)


@pytest.mark.parametrize("order", ["before-install", "after-install"])
async def test_a_low_level_servers_middleware_runs_before_replays(order: str) -> None:
    # mcp 2.x only (this module is skipped on 1.x): its types, server and middleware chain
    import mcp_types as types  # type: ignore[import-not-found]
    from mcp.server.lowlevel import Server

    runs: list[int] = []

    async def call_tool(ctx: Any, params: Any) -> Any:
        runs.append(params.arguments["amount"])
        text = types.TextContent(type="text", text=f"invoice #{len(runs)}")
        return types.CallToolResult(content=[text])

    server: Any = Server("low", on_call_tool=call_tool)  # type: ignore[call-arg]
    guard = Revocable()
    if order == "before-install":
        server.middleware.append(guard)
    installation = idemtools.install(server, default_policy=Policy(scope=shared))
    if order == "after-install":
        server.middleware.append(guard)
    call = {"name": "invoice", "arguments": {"amount": 3}, "idempotencyKey": "low-1"}
    async with memory_wire(App(server=server, installation=installation)) as wire:
        first = await wire.call(call)
        again = await wire.call(call)
        guard.allowed = False
        fresh = await wire.call({**call, "idempotencyKey": "low-2"})
        retry = await wire.call(call)
    assert first["result"]["content"][0]["text"] == "invoice #1"
    assert again["result"] == first["result"]
    assert retry["error"]["message"] == fresh["error"]["message"] == "revoked by policy"
    assert runs == [3]
    assert server.middleware[-1] is not guard
