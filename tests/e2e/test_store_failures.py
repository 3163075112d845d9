"""Store failures over the wire: fail closed for keyed calls, never for unkeyed ones."""

from __future__ import annotations

from typing import Any

import pytest

from idemtools.stores import MemoryStore, from_url

from ..services import RUN_ID, need_redis, proxy_to, with_port
from .harness import error_type, make_app, memory_wire


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
