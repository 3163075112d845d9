"""Tools that block the event loop longer than their lease run exactly once.

Before the lease keeper, renewals were scheduled on the tool's own event loop: a sync `def` tool
(FastMCP on mcp 1.x runs it inline on the loop) or an async tool calling `time.sleep` stopped
them, the lease ran out mid-run, `complete` was fenced off and the outcome dropped, and a retry
ran the tool again — on one instance with the default MemoryStore, and on a second instance
sharing Redis while the first still ran.

Two paths are held here on whatever mcp line is installed (CI runs both):

* one instance, the default MemoryStore, over the SDK's in-memory stream loop: a sequential
  retry after the blocking call is replayed;
* two instances (two servers, each on its own uvicorn thread and event loop) sharing one store
  (Redis, SQLite, PostgreSQL): a retry reaching instance B while A is still blocked is refused
  as in progress — the lease keeper renewed A's claim on its own thread — and after A finishes
  the retry on B replays A's outcome.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import idemtools
from idemtools import idempotent, shared
from idemtools.stores.base import Store
from tests.services import RUN_ID, need_postgres, need_redis

from .harness import (
    LEGACY,
    App,
    _Server,
    error_type,
    http_wire,
    memory_wire,
    result_text,
    serve_http,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

LEASE = 1.0
BLOCK = 2.5  # seconds the tool holds the event loop: more than two leases


def make_blocking_app(store: Store | None) -> App:
    server = _Server("blocking-server")
    app = App(server=server, installation=None)  # type: ignore[arg-type]
    registry = idemtools.Registry()

    @server.tool()
    @idempotent(registry=registry, lease=LEASE, scope=shared)
    def block_sync(seconds: float, label: str) -> str:
        """A sync tool: the SDK may run it inline on the event loop."""
        app.runs.append(("block_sync", label))
        time.sleep(seconds)
        return f"sync {label} #{app.count('block_sync')}"

    @server.tool()
    @idempotent(registry=registry, lease=LEASE, scope=shared)
    async def block_async(seconds: float, label: str) -> str:
        """An async tool making a blocking call: the event loop stops for `seconds`."""
        app.runs.append(("block_async", label))
        time.sleep(seconds)  # noqa: ASYNC251 - the blocking call under test
        return f"async {label} #{app.count('block_async')}"

    app.installation = idemtools.install(server, store=store, registry=registry)
    return app


def keyed(tool: str, key: str, seconds: float = BLOCK) -> dict[str, Any]:
    return {"name": tool, "arguments": {"seconds": seconds, "label": key}, "idempotencyKey": key}


TOOLS = ["block_sync", "block_async"]


@pytest.mark.parametrize("tool", TOOLS)
async def test_one_instance_memory_store_replays_after_a_blocking_call(tool: str) -> None:
    app = make_blocking_app(None)
    async with memory_wire(app) as wire:
        first = await wire.call(keyed(tool, "k1"))
        assert "error" not in first, first
        retry = await wire.call(keyed(tool, "k1"))
    assert retry == {**first, "id": retry["id"]}, "the retry must be the recorded answer"
    assert app.count(tool) == 1
    stats = app.installation.engine.stats
    assert (stats.executions, stats.replays, stats.lost_claims) == (1, 1, 0)


# -- two instances, one shared store ----------------------------------------------------------


@contextlib.contextmanager
def _redis_stores() -> Iterator[tuple[Store, Store]]:
    from idemtools.stores.redis import RedisStore

    url = need_redis()
    prefix = f"idemtools-test:{RUN_ID}:blocking:{uuid.uuid4().hex[:6]}:"
    yield RedisStore.from_url(url, prefix=prefix), RedisStore.from_url(url, prefix=prefix)


@contextlib.contextmanager
def _sqlite_stores(path: Path) -> Iterator[tuple[Store, Store]]:
    from idemtools.stores.sqlite import SQLiteStore

    file = path / "shared.sqlite"
    yield SQLiteStore(file), SQLiteStore(file)


@contextlib.contextmanager
def _postgres_stores() -> Iterator[tuple[Store, Store]]:
    import psycopg

    from idemtools.stores.postgres import PostgresStore

    url = need_postgres()
    table = f"idem_blocking_{RUN_ID}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(PostgresStore.schema_sql(table))  # type: ignore[arg-type]
    try:
        yield (
            PostgresStore.from_url(url, table=table, min_size=1, max_size=4),
            PostgresStore.from_url(url, table=table, min_size=1, max_size=4),
        )
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def _fleet(kind: str, tmp_path: Path) -> AsyncIterator[tuple[App, App, str, str]]:
    stores: Callable[[], Any] = {
        "redis": _redis_stores,
        "postgres": _postgres_stores,
        "sqlite": lambda: _sqlite_stores(tmp_path),
    }[kind]
    with stores() as (store_a, store_b):
        a, b = make_blocking_app(store_a), make_blocking_app(store_b)
        with serve_http(a, stateless=True) as url_a, serve_http(b, stateless=True) as url_b:
            yield a, b, url_a, url_b


@pytest.mark.services
@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("kind", ["redis", "sqlite", "postgres"])
async def test_two_instances_retry_while_blocked_is_in_progress_then_replays(
    kind: str, tool: str, tmp_path: Path
) -> None:
    async with _fleet(kind, tmp_path) as (a, b, url_a, url_b):
        key = f"blocked-{uuid.uuid4().hex[:8]}"
        first: dict[str, Any] = {}

        async def call_a() -> None:
            async with http_wire(url_a, LEGACY) as wire:
                first.update(await wire.call(keyed(tool, key, BLOCK + 0.5)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call_a)
            await anyio.sleep(1.6 * LEASE)  # A's lease would have run out without renewal
            async with http_wire(url_b, LEGACY) as wire:
                during = await wire.call(keyed(tool, key, BLOCK + 0.5))
        assert error_type(during) == "idempotency_key_in_progress", during
        assert "error" not in first, first
        async with http_wire(url_b, LEGACY) as wire:
            after = await wire.call(keyed(tool, key, BLOCK + 0.5))
        assert "error" not in after, after
        assert result_text(after) == result_text(first)
        assert a.count(tool) + b.count(tool) == 1, "exactly one execution in the fleet"
        assert a.installation.engine.stats.lost_claims == 0
        assert b.installation.engine.stats.replays == 1
