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


# -- the policy is read again at run time ------------------------------------


async def test_policy_changed_at_run_time_refuses_claims_within_the_recheck_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio
    import time

    import redis.asyncio as aredis

    caplog.set_level(logging.INFO, logger="idemtools")
    with private_redis(*SMALL, "--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url, policy_recheck=0.3)
        admin = aredis.Redis.from_url(url)
        engine = Engine(store)
        tool = _Tool()
        try:
            first = await engine.handle(_call("before"), tool)
            running = await store.claim("s", "in-flight", "f", "o", 30)
            await admin.config_set("maxmemory-policy", "allkeys-lru")
            changed = time.monotonic()
            refused = None
            while time.monotonic() - changed < 2.0:  # bounded: 0.3 s interval, generous margin
                answer = await engine.handle(_call(f"after-{time.monotonic()}"), tool)
                if answer.error is not None:
                    refused = answer
                    break
                await asyncio.sleep(0.05)
            noticed_after = time.monotonic() - changed
            # A call already running still records its outcome on the evicting Redis.
            recorded = await store.complete("s", "in-flight", "o", b'{"v":1,"result":{}}', 60)
            replay = await engine.handle(_call("before"), tool)
            await admin.config_set("maxmemory-policy", "noeviction")
            await asyncio.sleep(0.35)
            served_again = await engine.handle(_call("fixed"), tool)
        finally:
            await admin.aclose()
            await store.aclose()
    assert first.result is not None and running.claimed
    assert refused is not None and refused.error is not None, "allkeys-lru was never noticed"
    assert refused.error["data"]["type"] == "idempotency_store_unavailable"
    assert noticed_after < 0.3 + 0.5
    assert recorded is True
    assert replay.error is not None  # refused like any claim while evicting, never run again
    assert served_again.result is not None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "allkeys-lru" in errors[0]
    assert any("served again" in r.getMessage() for r in caplog.records)


async def test_reconnect_to_a_differently_configured_server_reads_the_policy_again() -> None:
    from ..services import TcpProxy, host_port

    with (
        private_redis(*SMALL, "--maxmemory-policy", "noeviction") as good,
        private_redis(*SMALL, "--maxmemory-policy", "volatile-lru") as bad,
    ):
        proxy = TcpProxy(*host_port(good, 6379))
        await proxy.start()
        # A long interval: only the reconnect can make the store read the policy again.
        store = RedisStore.from_url(f"redis://127.0.0.1:{proxy.port}/0", policy_recheck=3600)
        try:
            before = await store.claim("s", "k1", "f", "o", 30)
            await proxy.stop()
            proxy.target = host_port(bad, 6379)  # a "failover" to a replica set up otherwise
            await proxy.start()
            with pytest.raises(StoreUnavailableError, match="volatile-lru"):
                for attempt in range(3):  # the first may meet the cut connection
                    try:
                        await store.claim("s", f"k2-{attempt}", "f", "o", 30)
                    except StoreUnavailableError as exc:
                        if "volatile-lru" in str(exc):
                            raise
        finally:
            await store.aclose()
            await proxy.stop()
    assert before.claimed


async def test_redis_without_maxmemory_is_served_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="idemtools")
    with private_redis("--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url, policy_recheck=0.01)
        try:
            for i in range(3):
                assert (await store.claim("s", f"k{i}", "f", "o", 5)).claimed
                await __import__("asyncio").sleep(0.02)
        finally:
            await store.aclose()
    warnings = [r.getMessage() for r in caplog.records if "no maxmemory" in r.getMessage()]
    assert len(warnings) == 1 and caplog.records[0].levelno == logging.WARNING


async def test_the_start_up_check_reads_the_policy_before_any_claim(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The missing-maxmemory WARNING (and an evicting policy's ERROR) come
    when the server starts, from the start-up check's `get`, not at the first claim. The read
    refuses nothing but claims: a replay on an evicting Redis still reads its record."""
    caplog.set_level(logging.INFO, logger="idemtools")
    with private_redis("--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url)
        try:
            assert await store.get("s", "startup-check") is None
        finally:
            await store.aclose()
    assert [r for r in caplog.records if "no maxmemory" in r.getMessage()]
    caplog.clear()
    with private_redis(*SMALL, "--maxmemory-policy", "allkeys-lru") as url:
        store = RedisStore.from_url(url)
        try:
            assert await store.get("s", "startup-check") is None  # read, not refused
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert any("allkeys-lru" in r.getMessage() for r in errors)
            with pytest.raises(StoreUnavailableError):
                await store.claim("s", "k", "f", "o", 5)
        finally:
            await store.aclose()


async def test_redis_with_maxmemory_gives_no_such_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="idemtools")
    with private_redis(*SMALL, "--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url)
        try:
            assert (await store.claim("s", "k", "f", "o", 5)).claimed
        finally:
            await store.aclose()
    assert not [r for r in caplog.records if "no maxmemory" in r.getMessage()]


async def test_completion_on_a_full_redis_keeps_a_tombstone_and_never_runs_again() -> None:
    """Redis' budget is its maxmemory. A completion it refuses (OOM) used
    to be lost, and the retry ran the tool again after the lease; now a tombstone is kept."""
    import asyncio

    from idemtools.outcome import is_tombstone

    gate = asyncio.Event()

    class _Slow(_Tool):
        async def __call__(self) -> Outcome:
            self.runs += 1
            await gate.wait()
            return Outcome(result={"content": [{"type": "text", "text": "x" * 200_000}]})

    with private_redis(*SMALL, "--maxmemory-policy", "noeviction") as url:
        store = RedisStore.from_url(url)
        engine = Engine(store)
        tool = _Slow()
        try:
            running: asyncio.Task[Outcome] = asyncio.create_task(engine.handle(_call("big"), tool))  # type: ignore[arg-type]
            while tool.runs == 0:
                await asyncio.sleep(0.01)
            with filled_redis(url):
                gate.set()
                first = await running
                retry = await engine.handle(_call("big"), tool)
            record = await store.get(_scope(engine), "big")
        finally:
            await store.aclose()
    assert first.result is not None  # the caller got its answer
    assert record is not None and record.outcome is not None and is_tombstone(record.outcome)
    assert retry.error is not None
    assert retry.error["data"]["type"] == "idempotency_outcome_not_kept"
    assert tool.runs == 1
    assert store.outcomes_not_kept == 1


def _scope(engine: Engine) -> str:
    from idemtools.engine.decision import scope_hash

    call = _call("big")
    return scope_hash(engine.policy_for(call.name, call.policy), call.context, "big")
