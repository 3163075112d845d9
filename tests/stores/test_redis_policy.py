"""RedisStore on a Redis that may drop records (evicting `maxmemory-policy`) or is full.

Each test starts its own `redis-server` on a free port with a 3 MB `maxmemory`: the shared
Redis is never reconfigured. Skipped without the `redis-server` binary, failed without it
under IDEMTOOLS_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import logging

import pytest

from idemtools.engine import Engine, ToolCall
from idemtools.errors import StoreFullError, StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.scopes import shared
from idemtools.stores import from_url
from idemtools.stores.redis import RedisStore

from ..services import filled_redis, private_redis

pytestmark = pytest.mark.services

SMALL = ("--maxmemory", "3mb")


def _call(key: str) -> ToolCall:
    from idemtools.policy import Policy

    return ToolCall(name="pay", arguments={"n": 1}, key=key, policy=Policy(scope=shared))


class _Tool:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> Outcome:
        self.runs += 1
        return Outcome(result={"content": [{"type": "text", "text": f"ran #{self.runs}"}]})


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl", "allkeys-random"])
async def test_evicting_policy_is_refused_and_says_why(
    policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    with private_redis(*SMALL, "--maxmemory-policy", policy) as url:
        store = RedisStore.from_url(url)
        engine = Engine(store)
        tool = _Tool()
        try:
            caplog.set_level(logging.INFO, logger="idemtools")
            first = await engine.handle(_call("k1"), tool)
            second = await engine.handle(_call("k2"), tool)
            with pytest.raises(StoreUnavailableError, match=policy):
                await store.claim("s", "k", "f", "o", 5)
        finally:
            await store.aclose()
    assert tool.runs == 0
    for answer in (first, second):
        assert answer.error is not None
        assert answer.error["data"]["type"] == "idempotency_store_unavailable"
        # The client learns why (records could be dropped), not how the server is configured.
        assert "drop" in answer.error["message"] and policy not in answer.error["message"]
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # once, not per call
    assert policy in errors[0].getMessage() and "allow_eviction" in errors[0].getMessage()
    assert engine.stats.store_errors == 2


async def test_evicting_policy_is_served_with_the_explicit_opt_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="idemtools")
    with private_redis(*SMALL, "--maxmemory-policy", "allkeys-lru") as url:
        for store in (
            RedisStore.from_url(url, allow_eviction=True),
            from_url(url + "?allow_eviction=true&prefix=opt-out:"),
        ):
            engine = Engine(store)
            tool = _Tool()
            try:
                first = await engine.handle(_call("k1"), tool)
                again = await engine.handle(_call("k1"), tool)
            finally:
                await store.aclose()
            assert first.result is not None and again.result == first.result
            assert tool.runs == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("allkeys-lru" in w and "allow_eviction" in w for w in warnings)


async def test_noeviction_is_served_without_opt_out() -> None:
    with private_redis(*SMALL, "--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url)
        try:
            claim = await store.claim("s", "k", "f", "o", 5)
        finally:
            await store.aclose()
    assert claim.claimed


async def test_full_noeviction_redis_answers_store_full_and_still_replays() -> None:
    with private_redis(*SMALL, "--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url)
        engine = Engine(store)
        tool = _Tool()
        try:
            done = await engine.handle(_call("k-before"), tool)
            with filled_redis(url):
                full = await engine.handle(_call("k-new"), tool)
                replay = await engine.handle(_call("k-before"), tool)
                with pytest.raises(StoreFullError):
                    await store.claim("s", "k", "f", "o", 5)
        finally:
            await store.aclose()
    assert full.error is not None and full.error["data"]["type"] == "idempotency_store_full"
    assert replay.result == done.result  # reads still work on a full Redis
    assert tool.runs == 1
