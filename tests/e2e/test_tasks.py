"""Task-augmented tools/call (2025-11-25, mcp 1.30's experimental tasks): the task-creation
result is the recorded outcome, so a retry never creates a second task."""

from __future__ import annotations

import warnings
from typing import Any

import anyio
import pytest

import idemtools

from .harness import LINE, memory_wire, types

pytestmark = pytest.mark.skipif(
    LINE != 1 or not hasattr(types, "CreateTaskResult"),
    reason="server-side tasks exist on mcp 1.30 (experimental); 2.x parses but ignores them",
)


def _task_server(created: list[str]) -> Any:
    from mcp.server.lowlevel import Server

    server: Any = Server("tasks")

    @server.list_tools()  # type: ignore[misc,no-untyped-call]
    async def list_tools() -> list[Any]:
        # mcp 1.x only (skipped on 2.x), where `Tool` spells it `inputSchema`
        return [types.Tool(name="export", inputSchema={"type": "object"})]  # type: ignore[call-arg]

    @server.call_tool()  # type: ignore[misc]
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        ctx = server.request_context

        async def work(task_ctx: Any) -> Any:
            await anyio.sleep(0.05)
            return types.CallToolResult(content=[types.TextContent(type="text", text="exported")])

        result = await ctx.experimental.run_task(work)
        created.append(result.task.taskId)
        return result

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK marks its task API deprecated for 2.0
        server.experimental.enable_tasks()
    return server


async def test_retry_of_a_task_augmented_call_replays_the_same_task() -> None:
    created: list[str] = []
    server = _task_server(created)
    idemtools.install(server)
    app: Any = type("A", (), {"server": server})()
    params = {"name": "export", "arguments": {}, "task": {"ttl": 60000}, "idempotencyKey": "k-task"}
    async with memory_wire(app) as wire:
        first = await wire.call(params)
        again = await wire.call(params)
    assert "task" in first["result"], first
    assert again["result"] == first["result"]
    assert created == [first["result"]["task"]["taskId"]]  # one task, ever
