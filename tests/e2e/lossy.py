"""A transport that loses answers: the call ran on the server, its reply never reached the client.

A real `ClientSession` (the installed mcp line) talks to a real idemtools server (`server.run`
over the SDK's in-memory streams); the server's write stream drops the first `drop` tool
results, so the client's read timeout fires although the tool ran. That is the situation the
SEP exists for, and the one where a blind retry charges twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

import idemtools

from .harness import LINE, lowlevel_of


@dataclass
class Loss:
    """How many tool results to drop, and how many were dropped."""

    drop: int = 1
    dropped: int = 0


def _is_tool_result(message: Any) -> bool:
    payload = getattr(message, "message", None)
    if payload is None:
        return False
    data = payload.model_dump(by_alias=True, exclude_none=True, mode="json")
    data = data.get("root", data) if isinstance(data, dict) and "root" in data else data
    result = data.get("result") if isinstance(data, dict) else None
    return isinstance(result, dict) and "content" in result


class _LossyWrite:
    """The server's write stream, minus the first `loss.drop` tool results."""

    def __init__(self, inner: Any, loss: Loss) -> None:
        self._inner, self._loss = inner, loss

    async def send(self, message: Any) -> None:
        if self._loss.dropped < self._loss.drop and _is_tool_result(message):
            self._loss.dropped += 1
            return  # the tool ran; its answer is lost on the way
        await self._inner.send(message)

    async def __aenter__(self) -> _LossyWrite:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def read_timeout(seconds: float) -> Any:
    """A per-call read timeout in the installed line's type (1.x: timedelta, 2.x: float)."""
    return seconds if LINE == 2 else timedelta(seconds=seconds)


@contextlib.asynccontextmanager
async def lossy_session(server: Any, loss: Loss | None = None) -> AsyncIterator[ClientSession]:
    """An initialized `ClientSession` to `server` over streams that lose `loss.drop` results."""
    loss = loss if loss is not None else Loss()
    lowlevel = lowlevel_of(server)
    with idemtools.local_transport("memory"):
        async with (
            create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
            anyio.create_task_group() as tg,
        ):
            options = lowlevel.create_initialization_options()
            lossy: Any = _LossyWrite(s_write, loss)
            tg.start_soon(lambda: lowlevel.run(s_read, lossy, options))
            async with ClientSession(c_read, c_write) as session:
                await session.initialize()
                try:
                    yield session
                finally:
                    tg.cancel_scope.cancel()
