"""A TCP relay on 127.0.0.1 that loses replies: the request lands, its answer never arrives.

What a driver's retry, a proxy's or a load balancer's re-send sees: the connection closes after
the server ran the command, so the command is sent again. `ReplyDropper` forwards every byte
to the real server; when a request matching `matches` goes through (while `drops` are left),
the next reply on that connection is read from the server, thrown away, and both sides are
closed. A request is never dropped twice (its re-send is answered). Several relays may share
one `DropBudget` (one relay per Redis Cluster node).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["DropBudget", "ReplyDropper"]


class DropBudget:
    """How many replies may still be dropped, shared by the relays given it."""

    def __init__(self, drops: int) -> None:
        self.left = drops
        self.dropped = 0
        self._sent: set[bytes] = set()  # requests whose replies were dropped

    def take(self, request: bytes) -> bool:
        """Whether to drop the reply to `request`: never twice for the same bytes, so a
        re-sent request (the retry being tested) is answered."""
        if self.left <= 0 or request in self._sent:
            return False
        self._sent.add(request)
        self.left -= 1
        return True


class ReplyDropper:
    """A relay to `target` (see the module docstring); runs in the test's event loop."""

    def __init__(
        self,
        target: tuple[str, int],
        matches: Callable[[bytes], bool],
        budget: DropBudget,
    ) -> None:
        self.target = target
        self.matches = matches
        self.budget = budget
        self.port = 0
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()

    async def start(self) -> ReplyDropper:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._transports):
            transport.abort()  # type: ignore[attr-defined]  # a socket transport's
        self._transports.clear()
        await asyncio.sleep(0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer.transport, up_writer.transport)
        self._transports.update(pair)
        armed = False  # a matching request went through: its reply is to be lost

        def cut() -> None:
            for transport in pair:
                transport.abort()

        async def requests() -> None:
            nonlocal armed
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await reader.read(65536):
                    if not armed and self.matches(data) and self.budget.take(data):
                        armed = True  # before it is forwarded: its reply cannot slip past
                    up_writer.write(data)
                    await up_writer.drain()
            cut()

        async def replies() -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await up_reader.read(65536):
                    if armed:
                        self.budget.dropped += 1
                        break  # the server answered; the client never hears it
                    writer.write(data)
                    await writer.drain()
            cut()

        await asyncio.gather(requests(), replies())
        self._transports.difference_update(pair)
