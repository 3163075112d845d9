"""RedisStore against a real Redis: conformance, round trips, races, crashes, outages, bad data.

Needs the server at IDEMTOOLS_REDIS_URL (default redis://127.0.0.1:6379/0); skipped without it,
failed without it under IDEMTOOLS_REQUIRE_SERVICES=1. Every key this module writes carries a
per-run prefix and is deleted at the end.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import anyio
import pytest
import redis

from idemtools.engine import Engine, ToolCall
from idemtools.errors import RecordCorruptError, StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores.base import LapsingStore, Status
from idemtools.stores.redis import RedisStore

from ..services import (
    RUN_ID,
    crash_worker,
    delete_redis_keys,
    need_redis,
    proxy_to,
    race_worker,
    redis_url,
    scope_hash,
    with_port,
)
from .conformance import FakeClock, StoreConformance
from .flood import flood_scenario

pytestmark = pytest.mark.services

RUN_PREFIX = f"idemtools-test-{RUN_ID}:"


def _prefix() -> str:
    return f"{RUN_PREFIX}{uuid.uuid4().hex[:8]}:"


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    delete_redis_keys(RUN_PREFIX)


@pytest.fixture
async def store() -> AsyncIterator[RedisStore]:
    s = RedisStore.from_url(need_redis(), prefix=_prefix())
    yield s
    await s.aclose()


class TestRedisConformance(StoreConformance):
    LEASE = 0.4
    RETENTION = 0.8
    TOLERANCE = 0.1

    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        if max_records is not None or max_bytes is not None:
            pytest.skip(
                "RedisStore is bounded by Redis maxmemory (claims refused with StoreFullError "
                "on OOM, under maxmemory-policy noeviction), not by a record count or budget"
            )
        return RedisStore.from_url(
            need_redis(), prefix=_prefix(), max_records_per_scope=max_records_per_scope
        )

    async def advance(self, seconds: float) -> None:
        await anyio.sleep(seconds)


# -- engine helpers -------------------------------------------------------------------------------

OK = Outcome(result={"content": [{"type": "text", "text": "paid"}], "isError": False})


def _call(key: str, *, lease: float = 5.0, transactional: bool = False) -> ToolCall:
    policy = Policy.of(lease=lease, retention=60, scope=shared, transactional=transactional)
    return ToolCall(name="pay", arguments={"amount": 100}, key=key, policy=policy)


class Counter:
    def __init__(self, outcome: Outcome = OK) -> None:
        self.calls = 0
        self.outcome = outcome

    async def __call__(self) -> Outcome:
        self.calls += 1
        return self.outcome


def _type(outcome: Outcome) -> Any:
    assert outcome.error is not None, outcome
    return outcome.error["data"]["type"]


# -- round trips, keys, layout --------------------------------------------------------------------


class CountingRedis(redis.asyncio.Redis):
    """A real client that counts the commands it sends (each one is one round trip here)."""

    commands: list[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.commands.append(str(args[0]))
        # redis-py leaves `execute_command` unannotated
        return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


async def test_first_execution_is_two_round_trips_and_replay_one() -> None:
    client = cast(CountingRedis, CountingRedis.from_url(need_redis()))  # from_url is typed `Redis`
    client.commands = []
    store = RedisStore(client, prefix=_prefix())
    engine = Engine(store)
    run = Counter()
    await store.get("warm", "up")  # loads nothing; the scripts are loaded lazily below
    await engine.handle(_call("rt-warm"), run)  # NOSCRIPT → SCRIPT LOAD happens once here
    client.commands.clear()
    first = await engine.handle(_call("rt-1"), run)
    assert first == OK
    assert client.commands == ["EVALSHA", "EVALSHA"]  # claim, complete
    client.commands.clear()
    replay = await engine.handle(_call("rt-1"), run)
    assert replay == OK and replay.replayed
    assert client.commands == ["EVALSHA"]  # claim answers with the completed record
    assert run.calls == 2
    await store.aclose()
    assert await client.ping()  # a client passed in is not closed by the store
    await client.aclose()


async def test_record_layout_prefix_and_expiry(store: RedisStore) -> None:
    await store.claim("s", "k\x00\ud800", "fp", "o1", 5)
    name = store.key_name("s", "k\x00\ud800")
    assert name.startswith(store.prefix.encode()) and len(name) == len(store.prefix) + 64
    raw = store.client
    fields = await raw.hgetall(name)
    lease_end, claimed_at = int(fields.pop(b"l")), int(fields.pop(b"c"))
    assert fields == {b"s": b"p", b"f": b"fp", b"o": b"o1", b"k": b"0"}
    assert lease_end - claimed_at == 5000  # server milliseconds
    assert 4000 < await raw.pttl(name) <= 5000
    assert await store.complete("s", "k\x00\ud800", "o1", b'{"v":1}', 60)
    fields = await raw.hgetall(name)
    assert fields[b"v"] == b'{"v":1}' and b"l" not in fields  # a claim's bookkeeping is gone
    assert 59000 < await raw.pttl(name) <= 60000
    # Same key under another prefix (another application on the same Redis) is independent.
    other = RedisStore(raw, prefix=_prefix())
    assert (await other.claim("s", "k\x00\ud800", "fp", "o2", 5)).claimed


async def test_lease_expires_in_real_time_and_stale_owner_is_fenced(store: RedisStore) -> None:
    # Half-lease margins: the renewal must land in time on a loaded machine (a 0.1 s margin
    # failed under parallel test runs).
    assert (await store.claim("s", "k", "fp", "old", 1.0)).claimed
    await anyio.sleep(0.5)
    assert await store.renew("s", "k", "old", 1.0)
    await anyio.sleep(0.6)  # 1.1 s after the claim: alive only thanks to the renewal
    held = await store.claim("s", "k", "fp", "new", 1.0)
    assert not held.claimed and held.existing is not None and held.existing.owner == "old"
    await anyio.sleep(1.0)
    assert (await store.claim("s", "k", "fp", "new", 1.0)).claimed
    assert not await store.complete("s", "k", "old", b"{}", 60)
    assert not await store.release("s", "k", "old")
    assert await store.complete("s", "k", "new", b"{}", 60)


# -- outage and recovery --------------------------------------------------------------------------


async def test_dead_port_fails_closed_quickly() -> None:
    need_redis()
    dead = RedisStore.from_url(with_port(redis_url(), "127.0.0.1", 1), prefix=_prefix())
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        await dead.claim("s", "k", "fp", "o", 5)
    assert time.monotonic() - started < 2.0
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    run = Counter()
    outcome = await Engine(dead).handle(_call("dead-1"), run)
    assert _type(outcome) == "idempotency_store_unavailable" and run.calls == 0
    await dead.aclose()


async def test_outage_mid_run_then_recovery_without_restart() -> None:
    url = need_redis()
    async with proxy_to(url, 6379) as proxy:
        store = RedisStore.from_url(
            with_port(url, "127.0.0.1", proxy.port), prefix=_prefix(), connect_timeout=0.5
        )
        engine = Engine(store)
        run = Counter()
        assert await engine.handle(_call("before"), run) == OK
        await proxy.stop()  # Redis "goes away" mid-run
        started = time.monotonic()
        outcome = await engine.handle(_call("during"), run)
        assert _type(outcome) == "idempotency_store_unavailable"
        assert time.monotonic() - started < 2.0
        assert run.calls == 1  # nothing executed while the store was away
        await proxy.start()  # ...and comes back on the same port
        assert await engine.handle(_call("during"), run) == OK
        assert run.calls == 2
        replay = await engine.handle(_call("before"), run)
        assert replay == OK and run.calls == 2
        await store.aclose()


async def test_killed_connections_recover_on_next_operation(store: RedisStore) -> None:
    assert (await store.claim("s", "k", "fp", "o1", 5)).claimed
    admin = redis.asyncio.Redis.from_url(need_redis())
    own_id = await store.client.client_id()
    # redis-py annotates `_id` as str; the server takes the int that `client_id()` returns
    assert await admin.client_kill_filter(_id=own_id) == 1  # type: ignore[arg-type]  # the server drops our connection
    await admin.aclose()
    assert await store.complete("s", "k", "o1", b'{"v":1}', 60)  # reconnects, no error
    record = await store.get("s", "k")
    assert record is not None and record.status is Status.COMPLETED


async def test_records_survive_a_store_restart() -> None:
    url, prefix = need_redis(), _prefix()
    first = RedisStore.from_url(url, prefix=prefix)
    run = Counter()
    assert await Engine(first).handle(_call("restart-1"), run) == OK
    await first.aclose()
    second = RedisStore.from_url(url, prefix=prefix)
    replay = await Engine(second).handle(_call("restart-1"), run)
    assert replay == OK and replay.replayed and run.calls == 1
    await second.aclose()


# -- size and bad data ----------------------------------------------------------------------------


async def test_outcome_over_the_limit_is_not_run_twice(store: RedisStore) -> None:
    big = Outcome(result={"content": [{"type": "text", "text": "x" * 5000}], "isError": False})
    engine = Engine(store, max_outcome_bytes=1000)
    run = Counter(big)
    assert await engine.handle(_call("big"), run) == big  # the caller still gets its answer
    retry = await engine.handle(_call("big"), run)
    assert _type(retry) == "idempotency_outcome_too_large" and run.calls == 1


@pytest.mark.parametrize("damage", ["garbage-outcome", "wrong-type", "missing-fields", "no-ttl"])
async def test_corrupt_record_is_a_clear_error_never_a_second_run(
    store: RedisStore, damage: str
) -> None:
    engine = Engine(store)
    run = Counter()
    assert await engine.handle(_call("bad"), run) == OK
    name = store.key_name(scope_hash(), "bad")
    raw = store.client
    if damage == "garbage-outcome":
        await raw.hset(name, "v", b"\x00\xff not json")
    elif damage == "wrong-type":
        await raw.delete(name)
        await raw.set(name, "a plain string", ex=60)
    elif damage == "missing-fields":
        await raw.hdel(name, "f", "o")
    else:
        await raw.persist(name)
    retry = await engine.handle(_call("bad"), run)
    assert _type(retry) == "idempotency_record_corrupt"
    assert run.calls == 1
    if damage != "garbage-outcome":  # the store itself names the problem
        with pytest.raises(RecordCorruptError):
            await store.get(scope_hash(), "bad")
    await raw.delete(name)


# -- many processes -------------------------------------------------------------------------------


@pytest.mark.slow
def test_race_32_processes_one_key_then_500_keys() -> None:
    url, prefix = need_redis(), _prefix()
    _race(url, prefix)
    asyncio.run(_check_race_records(RedisStore.from_url(url, prefix=prefix)))


def _race(url: str, name: str, kind: str = "redis", procs: int = 32, nkeys: int = 500) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs)
    queue = ctx.Queue()
    keys = [f"key-{i}" for i in range(nkeys)]
    workers = [
        ctx.Process(target=race_worker, args=(kind, url, name, i, keys, barrier, queue))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    try:
        results = [queue.get(timeout=120) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
    errors = [r[3] for r in results if r[3]]
    assert not errors, errors
    assert sum(1 for r in results if r[1]) == 1, "exactly one process claims the single key"
    executed = [k for r in results for k in r[2]]
    assert sorted(executed) == sorted(keys), "every key executed exactly once"
    assert len({r[0] for r in results if r[2]}) > 1, "the keys really were spread out"


async def _check_race_records(store: Any, nkeys: int = 500) -> None:
    # No outcome lost: every key is completed with the outcome of the process that ran it.
    for i in range(nkeys):
        record = await store.get("race", f"key-{i}")
        assert record is not None and record.status is Status.COMPLETED
        assert record.outcome == f'"{record.owner}:key-{i}"'.encode()
    await store.aclose()


@pytest.mark.slow
async def test_sigkill_mid_call_key_in_progress_until_lease_then_runs_again() -> None:
    url, prefix = need_redis(), _prefix()
    store = RedisStore.from_url(url, prefix=prefix)
    await crash_scenario(store, "redis", url, prefix, lease=1.0)
    await store.aclose()


async def crash_scenario(store: Any, kind: str, url: str, name: str, *, lease: float) -> None:
    """Kill -9 a process in the middle of a keyed call; the key recovers by lease (SEP limit)."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    proc = ctx.Process(target=crash_worker, args=(kind, url, name, "crash", lease, None, ready))
    proc.start()
    try:
        assert await anyio.to_thread.run_sync(ready.wait, 30), "the worker never started"
        engine, run = Engine(store), Counter()
        await anyio.sleep(lease * 1.5)  # longer than a lease: kept alive by renewals
        assert _type(await engine.handle(_call("crash", lease=lease), run)) == (
            "idempotency_key_in_progress"
        )
        record = await store.get(scope_hash(), "crash")
        assert record is not None and record.status is Status.IN_PROGRESS
        stale_owner = record.owner
        os.kill(proc.pid or 0, signal.SIGKILL)
        proc.join(10)
        killed_at = time.monotonic()
        assert _type(await engine.handle(_call("crash", lease=lease), run)) == (
            "idempotency_key_in_progress"
        )
        # Retries see in_progress until the lease runs out, then the call runs again.
        while True:
            outcome = await engine.handle(_call("crash", lease=lease), run)
            if outcome == OK:
                break
            assert _type(outcome) == "idempotency_key_in_progress"
            assert time.monotonic() - killed_at < lease + 2.0, "the key stayed stuck"
            await anyio.sleep(0.05)
        assert run.calls == 1
        assert time.monotonic() - killed_at >= lease * 0.5
        # The dead owner, were it to come back, can change nothing.
        assert not await store.complete(scope_hash(), "crash", stale_owner, b'{"x":1}', 60)
        assert not await store.release(scope_hash(), "crash", stale_owner)
        replay = await engine.handle(_call("crash", lease=lease), run)
        assert replay == OK and run.calls == 1
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(5)


# -- per-scope quota ------------------------------------------------------------------------------


async def test_flood_one_scope_others_unaffected() -> None:
    store = RedisStore.from_url(need_redis(), prefix=_prefix(), max_records_per_scope=5)
    try:
        await flood_scenario(store, 5)
    finally:
        await store.aclose()


async def test_quota_does_not_rename_records_on_a_single_redis() -> None:
    # Turning the quota on or off (say during an incident) must not hide any record.
    prefix = _prefix()
    plain = RedisStore.from_url(need_redis(), prefix=prefix)
    quota = RedisStore.from_url(need_redis(), prefix=prefix, max_records_per_scope=3)
    try:
        assert plain.key_name("s", "k") == quota.key_name("s", "k")
        assert (await plain.claim("s", "k", "fp", "o1", 5)).claimed
        assert await plain.complete("s", "k", "o1", b'{"v":1}', 5)
        replay = await quota.claim("s", "k", "fp", "o2", 5)
        assert replay.existing is not None and replay.existing.outcome == b'{"v":1}'
    finally:
        await plain.aclose()
        await quota.aclose()


def test_cluster_records_share_their_quota_sets_slot() -> None:
    from redis.asyncio.cluster import RedisCluster
    from redis.crc import key_slot

    client = RedisCluster(host="127.0.0.1", port=1)  # never connected: names only
    quota = RedisStore(client, prefix="app:", max_records_per_scope=3)
    plain = RedisStore(client, prefix="app:")
    for scope in ("a", "b", "x\ud800"):
        slots = {key_slot(quota.key_name(scope, k)) for k in ("k1", "k2", "\x00")}
        assert slots == {key_slot(quota.quota_name(scope))}
    assert b"{" not in plain.key_name("a", "k1")  # no quota: records spread over the slots
    assert key_slot(quota.key_name("a", "k")) != key_slot(quota.key_name("b", "k"))


@pytest.mark.services
@pytest.mark.parametrize("coalesce", [True, False])
async def test_a_cold_store_takes_a_burst_past_its_pool_without_refusing(coalesce: bool) -> None:
    """400 keyed calls at once on a store that has not reached Redis yet: one eviction-policy
    check (not 400 INFO commands), and commands past the pool's 100 connections wait for one
    instead of failing with MaxConnectionsError (a refused keyed call)."""
    prefix = f"idemtools-test:{RUN_ID}:burst:{uuid.uuid4().hex[:6]}:"
    store = RedisStore.from_url(need_redis(), prefix=prefix, coalesce=coalesce)
    try:

        async def first_execution(i: int) -> bool:
            assert (await store.claim("s", f"k{i}", "fp", "o", 30)).claimed
            return await store.complete("s", f"k{i}", "o", b'"paid"', 60, fingerprint="fp")

        done = await asyncio.gather(*(first_execution(i) for i in range(400)))
        assert all(done)
        # from_url without cluster= builds a `Redis` client (no pool on the cluster one)
        assert store.client.connection_pool.max_connections == 100  # type: ignore[union-attr]
    finally:
        await store.aclose()
