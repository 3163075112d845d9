"""A claim the store applied whose answer was lost is released, fenced by owner.

The store applied the claim, then raised (Redis: the reply to the claim and to the store's own
retry on a fresh connection both lost; PostgreSQL: the answer after the implicit COMMIT lost,
twice): the client hears "not run". The engine releases the claim, as the cancellation path
does, so the key does not read `in_progress` for the whole lease: the retry runs at once, once.

Real servers behind a relay that drops the connection right after the server answered the
claim (the claim's fingerprint marks its request); nothing of the store is simulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.canonical import fingerprint
from idemtools.engine import ToolCall
from idemtools.engine.decision import scope_hash
from idemtools.scopes import CallContext
from idemtools.stores.base import Store

from ..services import RUN_ID, drop_postgres_tables, host_port, need_postgres, need_redis, with_port

POLICY = Policy.of(retention=60, lease=30, scope=shared)  # a long lease: a stuck key would show
ARGS = {"amount": 1, "lost": uuid.uuid4().hex}  # a fingerprint no warm-up request carries
CALL = ToolCall(name="charge", arguments=ARGS, key="k", policy=POLICY)
SCOPE = scope_hash(POLICY, CallContext(), "k")
TABLE = f"idemtools_lostclaim_{RUN_ID}"


class LosingRelay:
    """A TCP relay that, `drops` times, lets a request carrying `marker` reach the server and
    then cuts the connection as the server's answer comes back: the operation was applied,
    its answer is lost."""

    def __init__(self, host: str, port: int, marker: bytes, drops: int) -> None:
        self.target = (host, port)
        self.marker = marker
        self.drops = drops
        self.dropped = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers.update((writer, up_writer))
        armed = False

        async def upstream() -> None:
            nonlocal armed
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await reader.read(65536):
                    if self.marker in data and self.dropped < self.drops:
                        self.dropped += 1
                        armed = True
                    up_writer.write(data)
                    await up_writer.drain()
            up_writer.transport.abort()

        async def downstream() -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await up_reader.read(65536):
                    if armed:  # the server answered the marked request: lose the answer
                        break
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()
            up_writer.transport.abort()

        await asyncio.gather(upstream(), downstream())
        self._writers.discard(writer)
        self._writers.discard(up_writer)


@contextlib.asynccontextmanager
async def losing_relay(url: str, default_port: int) -> AsyncIterator[LosingRelay]:
    marker = fingerprint(CALL.name, CALL.arguments).encode()
    relay = LosingRelay(*host_port(url, default_port), marker=marker, drops=0)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.stop()


class Tool:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self) -> Outcome:
        self.calls += 1
        return Outcome(result={"content": [{"type": "text", "text": "paid"}], "isError": False})


async def _lost_then_retried(store: Store, direct: Store, relay: LosingRelay) -> None:
    # Connected, scripts loaded, statements known: the drop below catches the claim itself.
    assert (await store.claim("warm-up", "w", "f", "o", 5)).claimed
    assert await store.release("warm-up", "w", "o")
    engine = Engine(store, registry=Registry())
    tool = Tool()
    relay.drops = 2  # the claim and the store's own retry on a fresh connection
    first = await engine.handle(CALL, tool)
    assert relay.dropped == 2, "both answers were lost"
    assert first.error is not None
    assert first.error["data"]["type"] == "idempotency_store_unavailable"
    assert tool.calls == 0
    record = await direct.get(SCOPE, "k")
    assert record is None, f"the key was left {record.status.value} while nothing ran"
    assert engine.stats.released == 1
    # The retry runs at once, once; the next one replays.
    second = await engine.handle(CALL, tool)
    assert second.error is None and tool.calls == 1
    third = await engine.handle(CALL, tool)
    assert third.replayed and tool.calls == 1
    await engine.aclose()


@pytest.mark.services
async def test_redis_claim_applied_answer_lost_is_released() -> None:
    from idemtools.stores.redis import RedisStore

    url = need_redis()
    prefix = f"idemtools-test:{RUN_ID}:lostclaim:{uuid.uuid4().hex[:6]}:"
    async with losing_relay(url, 6379) as relay:
        store = RedisStore.from_url(with_port(url, "127.0.0.1", relay.port), prefix=prefix)
        direct = RedisStore.from_url(url, prefix=prefix)
        try:
            await _lost_then_retried(store, direct, relay)
        finally:
            await direct.aclose()


@pytest.mark.services
async def test_postgres_claim_committed_answer_lost_is_released() -> None:
    from idemtools.stores.postgres import PostgresStore

    url = need_postgres()
    table = f"{TABLE}_{uuid.uuid4().hex[:6]}"
    direct = PostgresStore.from_url(url, table=table, min_size=1, max_size=2)
    await direct.create_schema()
    try:
        async with losing_relay(url, 5432) as relay:
            store = PostgresStore.from_url(
                with_port(url, "127.0.0.1", relay.port), table=table, min_size=1, max_size=2
            )
            await _lost_then_retried(store, direct, relay)
    finally:
        await direct.aclose()
        drop_postgres_tables(table)
