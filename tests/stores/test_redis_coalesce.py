"""Coalescing in RedisStore (idemtools/stores/_coalesce.py) against a real Redis.

Concurrent operations share pipelines; each still gets its own reply or error, a cancelled
caller breaks nothing, NOSCRIPT (after SCRIPT FLUSH, on a private server) is handled per
operation, a lone operation goes straight out, and 64+ claims of one key have one winner.
The shared Redis gets per-run prefixes only; SCRIPT FLUSH runs on a private redis-server.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis._parsers import _AsyncRESP2Parser

from idemtools.engine import Engine, ToolCall
from idemtools.errors import RecordCorruptError, StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores._coalesce import Coalescer
from idemtools.stores.base import Status
from idemtools.stores.redis import RedisStore

from ..services import (
    RUN_ID,
    delete_redis_keys,
    need_redis,
    private_redis,
    proxy_to,
    with_port,
)

pytestmark = pytest.mark.services

RUN_PREFIX = f"idemtools-test-{RUN_ID}-co:"
OK = Outcome(result={"content": [{"type": "text", "text": "paid"}], "isError": False})


def _prefix() -> str:
    return f"{RUN_PREFIX}{uuid.uuid4().hex[:8]}:"


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    delete_redis_keys(RUN_PREFIX)


# The `redis` extra brings hiredis; redis-py's own parser (no hiredis) must work alike.
PARSERS = pytest.mark.parametrize("parser", [None, _AsyncRESP2Parser], ids=["default", "py"])


def _counting(url: str, parser: Any = None) -> tuple[redis.asyncio.Redis, list[int]]:
    """A real client, and the number of EVALSHAs in each write it sends (one per round trip)."""
    writes: list[int] = []

    class Counting(redis.asyncio.Connection):
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            data = command if isinstance(command, (bytes, str)) else b"".join(command)
            found = (data.encode() if isinstance(data, str) else data).count(b"\r\nEVALSHA\r\n")
            if found:
                writes.append(found)
            await super().send_packed_command(command, check_health)

    kwargs = {"parser_class": parser} if parser is not None else {}
    return redis.asyncio.Redis.from_url(url, connection_class=Counting, **kwargs), writes


@pytest.fixture(params=[None, _AsyncRESP2Parser], ids=["default", "py"])
async def counted(request: pytest.FixtureRequest) -> AsyncIterator[tuple[RedisStore, list[int]]]:
    client, writes = _counting(need_redis(), request.param)
    store = RedisStore(client, prefix=_prefix())
    await store.get("warm", "up")  # policy check and script load out of the way
    writes.clear()
    yield store, writes
    await store.aclose()
    await client.aclose()


async def test_concurrent_claims_share_pipelines_and_each_gets_its_own_reply(
    counted: tuple[RedisStore, list[int]],
) -> None:
    store, writes = counted
    n = 64
    claims = await asyncio.gather(
        *(store.claim("s", f"k{i}", f"fp{i}", f"o{i}", 30) for i in range(n))
    )
    assert all(c.claimed for c in claims)
    assert sum(writes) == n  # every claim sent exactly once
    assert len(writes) <= 4, writes  # in a few round trips, not 64
    done = await asyncio.gather(
        *(store.complete("s", f"k{i}", f"o{i}", b'{"i":%d}' % i, 60) for i in range(n))
    )
    assert all(done)
    records = await asyncio.gather(*(store.get("s", f"k{i}") for i in range(n)))
    for i, record in enumerate(records):  # nobody got another caller's reply
        assert record is not None and record.status is Status.COMPLETED
        assert (record.fingerprint, record.owner, record.outcome) == (
            f"fp{i}",
            f"o{i}",
            b'{"i":%d}' % i,
        )


async def test_a_lone_operation_goes_straight_out(
    counted: tuple[RedisStore, list[int]],
) -> None:
    store, writes = counted
    for i in range(5):  # one at a time: never a pipeline, never a wait for a loop tick
        assert (await store.claim("s", f"lone{i}", "fp", "o", 30)).claimed
        assert await store.complete("s", f"lone{i}", "o", b"{}", 60)
    assert writes == [1] * 10


async def test_coalesce_off_sends_every_operation_alone() -> None:
    client, writes = _counting(need_redis())
    store = RedisStore(client, prefix=_prefix(), coalesce=False)
    claims = await asyncio.gather(*(store.claim("s", f"k{i}", "fp", "o", 30) for i in range(16)))
    assert all(c.claimed for c in claims)
    assert len(writes) >= 16 and set(writes) == {1}
    await client.aclose()


@PARSERS
async def test_a_script_error_reaches_only_its_own_caller(parser: Any) -> None:
    client, _ = _counting(need_redis(), parser)
    ok_sha = await client.script_load("return ARGV[1]")
    boom_sha = await client.script_load("return redis.error_reply('boom ' .. ARGV[1])")
    coalescer = Coalescer(client)
    shas = [boom_sha if i % 5 == 3 else ok_sha for i in range(40)]
    replies = await asyncio.gather(
        *(coalescer.evalsha(sha, 1, f"{RUN_PREFIX}x", str(i)) for i, sha in enumerate(shas)),
        return_exceptions=True,
    )
    for i, reply in enumerate(replies):
        if i % 5 == 3:
            assert isinstance(reply, redis.ResponseError) and f"boom {i}" in str(reply)
        else:
            assert reply == str(i).encode()
    await coalescer.aclose()
    await client.aclose()


async def test_a_corrupt_record_fails_only_its_own_claim(
    counted: tuple[RedisStore, list[int]],
) -> None:
    store, writes = counted
    await store.client.set(store.key_name("s", "bad"), b"not a hash", ex=60)
    keys = [f"good{i}" for i in range(20)]
    keys.insert(7, "bad")
    results = await asyncio.gather(
        *(store.claim("s", k, "fp", "o", 30) for k in keys), return_exceptions=True
    )
    assert max(writes) > 1  # they did share a pipeline
    for key, result in zip(keys, results, strict=True):
        if key == "bad":
            assert isinstance(result, RecordCorruptError)
        else:
            assert not isinstance(result, BaseException) and result.claimed


async def test_cancelled_callers_break_nothing() -> None:
    """Cancel callers while queued and while their pipeline is on the wire (slow proxy)."""
    url = need_redis()
    async with proxy_to(url, 6379) as proxy:
        proxy.delay = 0.05
        store = RedisStore.from_url(with_port(url, "127.0.0.1", proxy.port), prefix=_prefix())
        await store.get("warm", "up")
        tasks = [
            asyncio.create_task(store.claim("s", f"k{i}", f"fp{i}", f"o{i}", 30)) for i in range(30)
        ]
        await asyncio.sleep(0)  # queued, not yet flushed
        tasks[3].cancel()
        await asyncio.sleep(0.02)  # the pipeline is on its way
        tasks[11].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for i, result in enumerate(results):
            if i in (3, 11):
                assert isinstance(result, asyncio.CancelledError)
            else:
                assert not isinstance(result, BaseException) and result.claimed, (i, result)
        # The shared connection is not desynchronised: every later reply is its own.
        records = await asyncio.gather(*(store.get("s", f"k{i}") for i in range(30)))
        for i, record in enumerate(records):
            if i == 3:
                continue  # cancelled before it was sent: may or may not have run
            assert record is not None and (record.fingerprint, record.owner) == (f"fp{i}", f"o{i}")
        await store.aclose()


@PARSERS
async def test_noscript_after_script_flush_is_handled_per_operation(parser: Any) -> None:
    with private_redis() as url:
        client, writes = _counting(url, parser)
        store = RedisStore(client, prefix=_prefix())
        engine = Engine(store)
        policy = Policy.of(lease=30, retention=60, scope=shared)

        async def run() -> Outcome:
            return OK

        def call(i: int) -> ToolCall:
            return ToolCall(name="pay", arguments={"i": i}, key=f"k{i}", policy=policy)

        assert not (await engine.handle(call(-1), run)).replayed  # scripts loaded
        await client.script_flush()
        writes.clear()
        firsts = await asyncio.gather(*(engine.handle(call(i), run) for i in range(64)))
        assert max(writes) > 1  # NOSCRIPT came back inside pipelines
        assert all(o == OK and not o.replayed for o in firsts)
        await client.script_flush()
        replays = await asyncio.gather(*(engine.handle(call(i), run) for i in range(64)))
        assert all(o == OK and o.replayed for o in replays)
        assert engine.stats.executions == 65
        await engine.aclose()
        await client.aclose()


async def test_a_failed_round_trip_fails_every_caller_with_its_own_error() -> None:
    url = need_redis()
    async with proxy_to(url, 6379) as proxy:
        store = RedisStore.from_url(
            with_port(url, "127.0.0.1", proxy.port), prefix=_prefix(), connect_timeout=0.5
        )
        await store.get("warm", "up")
        await proxy.stop()  # every connection cut, nothing listening
        results = await asyncio.gather(
            *(store.claim("s", f"k{i}", "fp", "o", 30) for i in range(20)),
            return_exceptions=True,
        )
        assert all(isinstance(r, StoreUnavailableError) for r in results), results
        causes = [r.__cause__ for r in results if isinstance(r, BaseException)]
        assert len({id(c) for c in causes}) == len(causes)  # one exception object per caller
        await proxy.start()  # back: the store recovers by itself
        claims = await asyncio.gather(
            *(store.claim("s", f"k{i}", "fp", "o", 30) for i in range(20))
        )
        assert all(c.claimed for c in claims)
        await store.aclose()


async def test_64_claims_of_one_key_have_exactly_one_winner(
    counted: tuple[RedisStore, list[int]],
) -> None:
    store, writes = counted
    claims = await asyncio.gather(
        *(store.claim("s", "contested", "fp", f"o{i}", 30) for i in range(100))
    )
    winners = [i for i, c in enumerate(claims) if c.claimed]
    assert len(winners) == 1
    for claim in claims:
        if not claim.claimed:
            assert claim.existing is not None
            assert claim.existing.status is Status.IN_PROGRESS
            assert claim.existing.owner == f"o{winners[0]}"
    assert max(writes) > 1


async def test_engine_runs_a_tool_once_for_64_concurrent_duplicates() -> None:
    store = RedisStore.from_url(need_redis(), prefix=_prefix())
    engine = Engine(store)
    runs = 0

    async def run() -> Outcome:
        nonlocal runs
        runs += 1
        await asyncio.sleep(0.05)
        return OK

    policy = Policy.of(lease=30, retention=60, scope=shared)
    call = ToolCall(name="pay", arguments={"amount": 1}, key="dup", policy=policy)
    outcomes = await asyncio.gather(*(engine.handle(call, run) for _ in range(64)))
    assert runs == 1
    assert sum(1 for o in outcomes if o == OK and not o.replayed) == 1
    refused = [o for o in outcomes if o.error is not None]
    assert len(refused) == 63
    assert {o.error["data"]["type"] for o in refused if o.error} == {"idempotency_key_in_progress"}
    await engine.aclose()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.integers(min_value=0, max_value=7), min_size=1, max_size=80))
def test_concurrent_claims_of_random_keys_have_one_winner_per_key(keys: list[int]) -> None:
    async def scenario() -> None:
        store = RedisStore.from_url(need_redis(), prefix=_prefix())
        claims = await asyncio.gather(
            *(store.claim("s", f"k{k}", "fp", f"o{i}", 30) for i, k in enumerate(keys))
        )
        for k in set(keys):
            mine = [i for i, key in enumerate(keys) if key == k]
            won = [f"o{i}" for i in mine if claims[i].claimed]
            assert len(won) == 1, (k, won)
            for i in mine:
                existing = claims[i].existing
                assert claims[i].claimed or (existing is not None and existing.owner == won[0])
            record = await store.get("s", f"k{k}")
            assert record is not None and record.owner == won[0]
        await store.aclose()

    asyncio.run(scenario())


async def test_aclose_waits_for_batches_on_the_wire() -> None:
    url = need_redis()
    async with proxy_to(url, 6379) as proxy:
        proxy.delay = 0.05
        store = RedisStore.from_url(with_port(url, "127.0.0.1", proxy.port), prefix=_prefix())
        await store.get("warm", "up")
        tasks = [asyncio.create_task(store.claim("s", f"k{i}", "fp", "o", 30)) for i in range(10)]
        await asyncio.sleep(0.01)
        await store.aclose()
        # The first claim to reach the store went out alone, in its caller's task (usually
        # tasks[0], not always: a task's first step may suspend before it sends); the other
        # nine shared the pipeline, which aclose waited for.
        alone = [t for t in tasks if not t.done()]
        assert len(alone) <= 1
        assert all(t.result().claimed for t in tasks if t.done())
        await asyncio.gather(*alone, return_exceptions=True)


_ARG = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=50),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
)


@given(st.lists(st.lists(_ARG, max_size=6), min_size=1, max_size=8))
def test_packed_batch_is_byte_for_byte_what_redis_py_sends(batch: list[list[Any]]) -> None:
    """The hand-packed pipeline equals redis-py's own packing of the same commands."""
    client = redis.asyncio.Redis()  # never connects: packing only
    coalescer = Coalescer(client)
    commands = [("sha", 1, *args) for args in batch]
    ours = coalescer._pack([(command, None) for command in commands])  # type: ignore[misc]
    connection = redis.asyncio.Connection()
    theirs = b"".join(connection.pack_commands([("EVALSHA", *c) for c in commands]))
    assert ours == theirs


async def test_a_full_batch_goes_out_at_once_and_the_rest_follows() -> None:
    client, writes = _counting(need_redis())
    sha = await client.script_load("return ARGV[1]")
    coalescer = Coalescer(client, max_batch=8)
    writes.clear()
    replies = await asyncio.gather(
        *(coalescer.evalsha(sha, 1, f"{RUN_PREFIX}x", str(i)) for i in range(50))
    )
    assert replies == [str(i).encode() for i in range(50)]
    assert sum(writes) == 50 and max(writes) == 8, writes
    await coalescer.aclose()
    await client.aclose()
