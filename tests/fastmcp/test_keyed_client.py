"""idemtools.integrations.fastmcp: FastMCP 4.x's `Client`, keyed.

A real FastMCP server with idemtools installed, a real `fastmcp.Client`, over an in-memory
transport that loses the first tool result (the tool ran; the answer never arrived).
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import anyio  # noqa: E402
import pytest  # noqa: E402
from fastmcp.exceptions import ToolError  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from idemtools.integrations.fastmcp import KeyedClient  # noqa: E402
from tests.fastmcp.lossy_shop import client_for, make_shop  # noqa: E402


async def test_without_the_integration_a_lost_answer_runs_twice() -> None:
    shop = make_shop()
    async with client_for(shop) as client:
        with pytest.raises(MCPError):
            await client.call_tool("charge", {"amount": 5}, timeout=0.3)
        result = await client.call_tool("charge", {"amount": 5})
    assert result.data == {"amount": 5, "run": 2}
    assert shop.runs == ["charge", "charge"]


async def test_with_it_a_lost_answer_runs_once_and_results_are_fastmcps() -> None:
    shop = make_shop()
    async with client_for(shop) as plain:
        client = KeyedClient(plain)
        with pytest.raises(MCPError):
            await client.call_tool("charge", {"amount": 5}, timeout=0.3)
        result = await client.call_tool("charge", {"amount": 5})
        # FastMCP's parsed result, the first execution's answer replayed.
        assert result.data == {"amount": 5, "run": 1}
        assert result.structured_content == {"amount": 5, "run": 1}
        # A definite answer: the next equal call is a new operation.
        again = await client.call_tool("charge", {"amount": 5})
    assert again.data == {"amount": 5, "run": 2}
    assert shop.runs == ["charge", "charge"]


async def test_an_error_result_raises_tool_error_unless_told_not_to() -> None:
    shop = make_shop()
    async with client_for(shop, drop=0) as plain:
        client = KeyedClient(plain)
        with pytest.raises(ToolError, match="declined 3"):
            await client.call_tool("decline", {"amount": 3})
        returned = await client.call_tool("decline", {"amount": 3}, raise_on_error=False)
        raw = await client.call_tool_mcp("decline", {"amount": 3}, idempotency_key="k-raw")
        replay = await client.call_tool_mcp("decline", {"amount": 3}, idempotency_key="k-raw")
    assert returned.is_error and raw.is_error and replay.content == raw.content
    assert shop.runs == ["decline"] * 3  # ToolError is definite: no key reused after it


async def test_in_progress_is_waited_out() -> None:
    shop = make_shop()
    async with client_for(shop, drop=0) as plain:
        client = KeyedClient(plain)
        with pytest.raises(MCPError):
            await client.call_tool("slow", {"n": 1}, timeout=0.3)

        async def open_gate_later() -> None:
            await anyio.sleep(0.4)
            shop.gate.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(open_gate_later)
            with anyio.fail_after(10):
                result = await client.call_tool("slow", {"n": 1})
    assert result.data == "slow 1" and shop.runs == ["slow"]


async def test_fastmcps_client_span_is_kept() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    shop = make_shop()
    tracer = provider.get_tracer("test")
    with pytest.MonkeyPatch.context() as mp:
        import fastmcp.client.telemetry as telemetry

        mp.setattr(telemetry, "get_tracer", lambda *a, **k: tracer)
        async with client_for(shop, drop=0) as plain:
            await KeyedClient(plain).call_tool("charge", {"amount": 1})
    spans = [s for s in exporter.get_finished_spans() if s.name == "tools/call charge"]
    assert len(spans) == 1 and (spans[0].attributes or {})["gen_ai.tool.name"] == "charge"
