"""A FastMCP 4.x shop server with idemtools installed, and an in-memory transport that loses
answers (the tool ran; its result never reached the client). Shared by the FastMCP-based
integration tests (fastmcp, pydantic-ai)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastmcp import Client, FastMCP
from fastmcp.client.transports.memory import (
    FastMCPTransport,
    _enter_server_lifespan,
    _lowlevel_of,
)
from mcp.shared.memory import create_client_server_memory_streams

import idemtools
from idemtools import idempotent
from tests.e2e.lossy import Loss, _LossyWrite


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
async def client_for(shop: Shop, drop: int = 1, **options: Any) -> AsyncIterator[Client[Any]]:
    with idemtools.local_transport("memory"):
        async with Client(LossyTransport(shop.server, Loss(drop=drop)), **options) as client:
            yield client
