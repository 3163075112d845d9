"""FastMCP's `ResponseCachingMiddleware` and keyed calls.

The decision (docs/fastmcp.md): a keyed call bypasses the response cache both ways. It is
never answered from the cache (that would skip the execution the key stands for, and
idemtools would record an answer no execution of this key produced), and its result is never
written to the cache (a replay from the record must not refresh, nor a keyed execution seed,
what unkeyed callers get). Unkeyed calls are cached exactly as before.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import pytest  # noqa: E402
from fastmcp import Client  # noqa: E402
from fastmcp.server.middleware.caching import ResponseCachingMiddleware  # noqa: E402

from idemtools.client import NO_RETRY, call_tool  # noqa: E402
from tests.fastmcp.app import make_app, text  # noqa: E402


@pytest.mark.parametrize("added", ["before install", "after install"])
async def test_keyed_calls_bypass_the_response_cache(added: str) -> None:
    cache = ResponseCachingMiddleware()
    app = make_app(middleware=[cache] if added == "before install" else [])
    if added == "after install":
        app.server.add_middleware(cache)
    async with Client(app.server) as client:
        cached = text(await client.call_tool("charge", {"amount": 1}))
        assert text(await client.call_tool("charge", {"amount": 1})) == cached  # cache is on
        assert app.count("charge") == 1

        executed = await call_tool(
            client.session, "charge", {"amount": 1}, idempotency_key="k", retry=NO_RETRY
        )
        assert text(executed) != cached  # not answered from the cache: it ran
        assert app.count("charge") == 2
        replayed = await call_tool(
            client.session, "charge", {"amount": 1}, idempotency_key="k", retry=NO_RETRY
        )
        assert text(replayed) == text(executed)  # from the idempotency record
        assert app.count("charge") == 2

        # Unkeyed callers still get the cached answer, not the keyed one.
        assert text(await client.call_tool("charge", {"amount": 1})) == cached
    assert app.count("charge") == 2
    assert app.installation.engine.stats.executions == 1


async def test_a_mounted_servers_cache_is_bypassed_too() -> None:
    app = make_app(child_middleware=[ResponseCachingMiddleware()])
    async with Client(app.server) as client:
        unkeyed = [text(await client.call_tool("child_ship", {"order": "o"})) for _ in range(2)]
        assert unkeyed[0] == unkeyed[1]  # the child's cache answers unkeyed calls
        answers = [
            text(
                await call_tool(
                    client.session, "child_ship", {"order": "o"}, idempotency_key=k, retry=NO_RETRY
                )
            )
            for k in ("a", "b")
        ]
    assert len({unkeyed[0], *answers}) == 3  # two keys, two executions, none from the cache
    assert app.count("ship") == 3
