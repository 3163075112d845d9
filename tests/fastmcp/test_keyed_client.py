"""idemtools.integrations.fastmcp (issue 19, A2): FastMCP 4.x's `Client`, keyed.

A real FastMCP server with idemtools installed, a real `fastmcp.Client`, over an in-memory
transport that loses the first tool result (the tool ran; the answer never arrived).
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import contextlib  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import pytest  # noqa: E402
from fastmcp import Client, FastMCP  # noqa: E402
from fastmcp.client.transports.memory import (  # noqa: E402
    FastMCPTransport,
    _enter_server_lifespan,
    _lowlevel_of,
)
from fastmcp.exceptions import ToolError  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp.shared.memory import create_client_server_memory_streams  # noqa: E402

import idemtools  # noqa: E402
from idemtools import idempotent  # noqa: E402
from idemtools.integrations.fastmcp import KeyedClient  # noqa: E402
from tests.e2e.lossy import Loss, _LossyWrite  # noqa: E402


@dataclass
class Shop:
    server: Any
    runs: list[str] = field(default_factory=list)
    gate: anyio.Event = field(default_factory=anyio.Event)


def make_shop() -> Shop:
    mcp = FastMCP("shop")
    shop = Shop(server=mcp)

    @mcp.tool
    @idempotent(scope=idemtools.shared)
    def charge(amount: int) -> dict[str, int]:
        shop.runs.append("charge")
        return {"amount": amount, "run": len(shop.runs)}

    @mcp.tool
    @idempotent(scope=idemtools.shared)
    def decline(amount: int) -> str:
        shop.runs.append("decline")
        raise ValueError(f"declined {amount}")

    @mcp.tool
    @idempotent(scope=idemtools.shared, lease=5)
    async def slow(n: int) -> str:
        shop.runs.append("slow")
        await shop.gate.wait()
        return f"slow {n}"

    idemtools.install(mcp)
    return shop


class LossyTransport(FastMCPTransport):
    """FastMCP's in-memory transport, minus the first `loss.drop` tool results."""

    def __init__(self, server: Any, loss: Loss) -> None:
        super().__init__(server)
        self.loss = loss

    @contextlib.asynccontextmanager
    async def connect_session(self, **session_kwargs: Any) -> AsyncIterator[Any]:
        from mcp.client.session import ClientSession

        session_kwargs.pop("transport_options", None)
        async with (
            create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
            _enter_server_lifespan(server=self.server),
            anyio.create_task_group() as tg,
        ):
            lowlevel = _lowlevel_of(self.server)
            lossy: Any = _LossyWrite(s_write, self.loss)
            tg.start_soon(
                lambda: lowlevel.run(s_read, lossy, lowlevel.create_initialization_options())
            )
            try:
                async with ClientSession(c_read, c_write, **session_kwargs) as session:
                    yield session
            finally:
                tg.cancel_scope.cancel()


@contextlib.asynccontextmanager
async def client_for(shop: Shop, drop: int = 1) -> AsyncIterator[Client[Any]]:
    with idemtools.local_transport("memory"):
        async with Client(LossyTransport(shop.server, Loss(drop=drop))) as client:
            yield client


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
