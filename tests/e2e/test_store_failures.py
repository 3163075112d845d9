"""Store failures over the wire: fail closed for keyed calls, never for unkeyed ones."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from idemtools.stores import MemoryStore, from_url
from idemtools.stores.base import Store

from ..services import (
    RUN_ID,
    filled_redis,
    need_postgres,
    need_redis,
    private_redis,
    proxy_to,
    with_port,
)
from .harness import LINE, error_type, http_wire, make_app, memory_wire, serve_http


@pytest.mark.services
async def test_redis_outage_fails_closed_and_recovers_without_restart() -> None:
    url = need_redis()
    async with proxy_to(url, 6379) as proxy:
        store = from_url(with_port(url, "127.0.0.1", proxy.port) + f"?prefix=idem-out-{RUN_ID}:")
        app = make_app(store=store)
        try:
            async with memory_wire(app) as wire:

                def keyed(n: int, key: str) -> dict[str, Any]:
                    return {"name": "charge", "arguments": {"amount": n}, "idempotencyKey": key}

                assert "result" in await wire.call(keyed(1, "k-before"))
                await proxy.stop()  # Redis is gone for this server
                down = await wire.call(keyed(2, "k-during"))
                assert error_type(down) == "idempotency_store_unavailable"
                unkeyed = await wire.call({"name": "charge", "arguments": {"amount": 3}})
                assert "result" in unkeyed  # calls without a key do not need the store
                await proxy.start()  # Redis is back, same server process
                back = await wire.call(keyed(2, "k-during"))
                replay = await wire.call(keyed(1, "k-before"))
            assert "result" in back and "result" in replay
            assert [n for name, n in app.runs if name == "charge"] == [1, 3, 2]
        finally:
            await store.aclose()


async def test_full_store_refuses_new_keys_and_keeps_its_records() -> None:
    app = make_app(store=MemoryStore(max_records=2))
    async with memory_wire(app) as wire:
        for n in (1, 2):
            await wire.call(
                {"name": "charge", "arguments": {"amount": n}, "idempotencyKey": f"k{n}"}
            )
        full = await wire.call(
            {"name": "charge", "arguments": {"amount": 3}, "idempotencyKey": "k3"}
        )
        replay = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k1"}
        )
    assert error_type(full) == "idempotency_store_full"
    assert "result" in replay  # nothing was evicted to make room
    assert app.count("charge") == 2


# -- the operator sees every store failure; the client sees none of the store's details ----------

GENERIC = "the idempotency store is unavailable; the call was not run"


def _dead_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there once the socket is closed


@contextlib.asynccontextmanager
async def _broken_store(kind: str) -> AsyncIterator[tuple[Store, list[str]]]:
    """A store that really fails, and the strings its failure must never show a client."""
    if kind == "redis-dead-port":
        port = _dead_port()
        store = from_url(f"redis://127.0.0.1:{port}/0", connect_timeout=0.5)
        yield store, [str(port), "127.0.0.1", "Connect", "Errno", "redis"]
    elif kind == "postgres-down":
        url = need_postgres()
        async with proxy_to(url, 5432) as proxy:
            await proxy.stop()  # PostgreSQL is gone behind the relay
            store = from_url(with_port(url, "127.0.0.1", proxy.port), timeout=1.0)
            yield store, [str(proxy.port), "127.0.0.1", "psycopg", "connection", "PostgreSQL"]
    elif kind == "postgres-no-table":
        table = f"idem_missing_{RUN_ID}"
        store = from_url(need_postgres() + f"?table={table}", timeout=1.0)
        yield store, [table, "LINE", "SELECT", "INSERT", "relation", "create_schema"]
    else:
        directory = f"/nonexistent-{RUN_ID}"
        store = from_url(f"sqlite://{directory}/idem.sqlite")
        yield store, [directory, "idem.sqlite", "unable to open", "SQLite"]
    await store.aclose()


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite-bad-path",
        pytest.param("redis-dead-port", marks=pytest.mark.services),
        pytest.param("postgres-down", marks=pytest.mark.services),
        pytest.param("postgres-no-table", marks=pytest.mark.services),
    ],
)
async def test_store_failure_is_logged_with_cause_counted_and_generic_for_the_client(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="idemtools")
    async with _broken_store(kind) as (store, secrets):
        app = make_app(store=store)
        async with memory_wire(app) as wire:
            # Start-up: the server started (it answered initialize) and said the store is down.
            startup = [
                r for r in caplog.records if r.levelno == logging.ERROR and r.name == "idemtools"
            ]
            assert len(startup) == 1, [r.getMessage() for r in startup]
            assert store.kind in startup[0].getMessage()
            keyed = await wire.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-down"}
            )
            unkeyed = await wire.call({"name": "charge", "arguments": {"amount": 2}})
    error = keyed["error"]
    assert error["data"]["type"] == "idempotency_store_unavailable"
    assert error["message"] == GENERIC
    for secret in secrets:
        assert secret.lower() not in error["message"].lower()
    assert "result" in unkeyed and app.count("charge") == 1  # unkeyed calls keep working
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("store" in w and store.kind in w and "failed" in w for w in warnings), warnings
    # The log carries the cause the client never sees.
    assert any(any(s.lower() in w.lower() for s in secrets) for w in warnings), warnings
    stats = app.installation.engine.stats
    assert stats.store_errors == 2  # the start-up check and the keyed call
    assert stats.refusals == 1 and stats.executions == 0


@pytest.mark.parametrize("stateless", [False, True], ids=["stateful", "stateless"])
async def test_startup_check_over_http(stateless: bool, caplog: pytest.LogCaptureFixture) -> None:
    # The HTTP transports enter the server lifespan themselves (mcp 2.x once at start-up,
    # mcp 1.x per session): the check still runs once and the server still serves.
    caplog.set_level(logging.INFO, logger="idemtools")
    async with _broken_store("sqlite-bad-path") as (store, secrets):
        app = make_app(store=store, auth=True, stateless=stateless)
        with serve_http(app, stateless=stateless) as url:
            async with http_wire(url, token="tok-alice") as wire:
                await wire.call({"name": "charge", "arguments": {"amount": 1}})
                await wire.call({"name": "charge", "arguments": {"amount": 2}})
                keyed = await wire.call(
                    {"name": "charge", "arguments": {"amount": 3}, "idempotencyKey": "k-h"}
                )
    errors = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and r.name == "idemtools"
    ]
    assert len(errors) == 1 and "sqlite" in errors[0] and secrets[0] in errors[0], errors
    assert keyed["error"]["message"] == GENERIC
    assert app.count("charge") == 2


async def test_startup_check_logs_nothing_alarming_when_the_store_answers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="idemtools")
    app = make_app()
    async with memory_wire(app) as wire:
        assert "result" in await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-ok"}
        )
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "idemtools"]
    assert any("memory" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)
    assert app.installation.engine.stats.store_errors == 0


@pytest.mark.services
async def test_full_redis_answers_store_full_and_the_client_does_not_retry() -> None:
    from idemtools.client import RetryPolicy, call_tool
    from idemtools.errors import StoreFullError

    from .test_client import session_for

    with private_redis("--maxmemory", "3mb", "--maxmemory-policy", "noeviction") as url:
        store = from_url(url)
        app = make_app(store=store)
        try:
            async with session_for(app) as session:
                await call_tool(session, "charge", {"amount": 1}, idempotency_key="k-1")
                with filled_redis(url):
                    with pytest.raises(StoreFullError) as refused:
                        await call_tool(
                            session,
                            "charge",
                            {"amount": 2},
                            idempotency_key="k-2",
                            retry=RetryPolicy(attempts=5, initial_delay=0.01),
                        )
                    replay = await call_tool(
                        session, "charge", {"amount": 1}, idempotency_key="k-1"
                    )
        finally:
            await store.aclose()
    assert "script" not in str(refused.value)  # no script SHA or line for the client
    assert app.installation.engine.stats.refusals == 1  # one attempt: a retry cannot help
    assert app.count("charge") == 1
    assert not (replay.isError if LINE == 1 else replay.is_error)
