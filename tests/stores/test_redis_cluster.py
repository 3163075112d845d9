"""RedisStore on a real Redis Cluster: conformance, load, broken connections, resharding, failover.

The cluster is private to the run (`redis_cluster` in tests/conftest.py: six `redis-server`
processes, 3 primaries with one replica each, started once per session). Each test works under
its own key prefix, so tests never see each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from typing import Any

import anyio
import pytest
import redis
from redis.asyncio.cluster import RedisCluster

from idemtools.engine import Engine, ToolCall
from idemtools.errors import StoreUnavailableError
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores import from_url
from idemtools.stores.base import LapsingStore, Status
from idemtools.stores.redis import RedisStore

from ..services import LocalCluster, scope_hash
from .conformance import FakeClock, StoreConformance
from .test_redis import _check_race_records, _race

pytestmark = [pytest.mark.services, pytest.mark.cluster]


def _prefix() -> str:
    return f"cl-{uuid.uuid4().hex[:8]}:"


def _policy(lease: float = 5.0) -> Policy:
    return Policy.of(lease=lease, retention=60, scope=shared)


def _text(outcome: Outcome) -> str:
    assert outcome.result is not None, outcome
    text: str = outcome.result["content"][0]["text"]
    return text


class TestRedisClusterConformance(StoreConformance):
    LEASE = 0.4
    RETENTION = 0.8
    TOLERANCE = 0.1

    @pytest.fixture(autouse=True)
    def _cluster(self, redis_cluster: LocalCluster) -> None:
        self.cluster_url = redis_cluster.url

    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        if max_records is not None or max_bytes is not None:
            pytest.skip("RedisStore is bounded by Redis maxmemory, not a record count")
        return RedisStore.from_url(
            self.cluster_url, prefix=_prefix(), max_records_per_scope=max_records_per_scope
        )

    async def advance(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def test_cluster_url_forms(redis_cluster: LocalCluster) -> None:
    store = from_url(f"{redis_cluster.url}?prefix=p:&wait_replicas=1&wait_timeout=0.5")
    assert isinstance(store, RedisStore)
    assert isinstance(store.client, RedisCluster)
    assert (store.prefix, store.wait_replicas, store.wait_timeout) == ("p:", 1, 0.5)
    plain = from_url("redis://127.0.0.1:6379/0?wait_replicas=2")
    assert isinstance(plain, RedisStore) and not isinstance(plain.client, RedisCluster)
    assert plain.wait_replicas == 2
    with pytest.raises(ValueError, match="wait_replicas"):
        from_url(f"{redis_cluster.url}?wait_replicas=-1")


async def test_a_cluster_url_may_list_several_nodes_and_starts_past_a_dead_one(
    redis_cluster: LocalCluster,
) -> None:
    """`redis+cluster://dead,live`: a client starting while the first node is down (the one a
    failover replaced) starts from the next one listed."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    live = redis_cluster.live_url.split("://", 1)[1]
    store = RedisStore.from_url(f"redis+cluster://127.0.0.1:{dead},{live}", prefix=_prefix())
    try:
        assert (await store.claim("s", "k", "fp", "o", 30)).claimed
        assert await store.complete("s", "k", "o", b'"ok"', 60, fingerprint="fp")
        record = await store.get("s", "k")
        assert record is not None and record.outcome == b'"ok"'
    finally:
        await store.aclose()
    # One node only, and it is down: the store cannot start (and says so, as unavailable).
    alone = RedisStore.from_url(f"redis+cluster://127.0.0.1:{dead}/0", prefix=_prefix())
    try:
        with pytest.raises(StoreUnavailableError):
            await alone.claim("s", "k", "fp", "o", 30)
    finally:
        await alone.aclose()


# -- under load ------------------------------------------------------------------------------------


async def _identical_calls(store: RedisStore, keys: list[str], copies: int) -> dict[str, int]:
    """`copies` concurrent identical keyed calls per key through one engine; executions per key."""
    engine = Engine(store)
    runs: Counter[str] = Counter()

    async def one(key: str) -> Outcome:
        async def run() -> Outcome:
            runs[key] += 1
            await asyncio.sleep(0.01)
            return Outcome(result={"content": [{"type": "text", "text": key}], "isError": False})

        call = ToolCall(name="pay", arguments={"amount": 1}, key=key, policy=_policy())
        return await engine.handle(call, run)

    outcomes = await asyncio.gather(*(one(k) for k in keys for _ in range(copies)))
    kinds = Counter(o.error["data"]["type"] for o in outcomes if o.error is not None)
    assert set(kinds) <= {"idempotency_key_in_progress"}, kinds
    assert engine.stats.record_failures == 0 and engine.stats.lost_claims == 0
    for key in keys:  # every key replays its own outcome, without running again
        assert _text(await one(key)) == key
    return dict(runs)


async def test_300_keys_4_concurrent_identical_calls_execute_once_and_replay(
    redis_cluster: LocalCluster,
) -> None:
    # 1200 calls in flight: more than redis-py's 100 connections per node, past which a client
    # fails commands with MaxConnectionsError (lost renewals, "store unavailable").
    store = RedisStore.from_url(redis_cluster.url, prefix=_prefix())
    keys = [f"k{i}" for i in range(300)]
    try:
        runs = await _identical_calls(store, keys, 4)
    finally:
        await store.aclose()
    assert runs == dict.fromkeys(keys, 1)


async def test_connections_killed_under_load_fail_closed_and_nothing_is_lost(
    redis_cluster: LocalCluster,
) -> None:
    """The race behind "'NoneType' object has no attribute 'writelines'": connections killed
    server-side while many commands flow. Every failure must be StoreUnavailableError (the
    engine retries a completion on it), never a raw AttributeError/TypeError from the driver."""
    store = RedisStore.from_url(redis_cluster.url, prefix=_prefix())
    admin = [redis.asyncio.Redis(port=p) for p in redis_cluster.ports]
    failures: Counter[str] = Counter()
    done = asyncio.Event()

    async def killer() -> None:
        while not done.is_set():
            await asyncio.sleep(0.03)
            for client in admin:
                with contextlib.suppress(redis.RedisError):
                    await client.client_kill_filter(_type="normal", skipme=True)

    async def worker(w: int) -> None:
        for i in range(15):
            try:
                claim = await store.claim("s", f"w{w}-{i}", "fp", f"o{w}", 5)
                if claim.claimed:
                    await store.complete("s", f"w{w}-{i}", f"o{w}", b'"x"', 60)
            except StoreUnavailableError:
                failures["unavailable"] += 1
            except Exception as exc:  # the bug: anything else escaping the store
                failures[repr(exc)] += 1

    kill = asyncio.create_task(killer())
    try:
        with anyio.fail_after(90):
            await asyncio.gather(*(worker(w) for w in range(30)))
    finally:
        done.set()
        await kill
        for client in admin:
            await client.aclose()
        await store.aclose()
    assert set(failures) <= {"unavailable"}, failures


async def test_lease_keeper_gets_its_own_cluster_client(redis_cluster: LocalCluster) -> None:
    store = RedisStore.from_url(redis_cluster.url, prefix=_prefix())
    keeper = store.for_lease_keeper()
    assert isinstance(keeper, RedisStore)
    assert isinstance(keeper.client, RedisCluster) and keeper.client is not store.client
    try:
        # 2 s: the keeper's client discovers the cluster in its own thread first, which took
        # over 0.5 s on a loaded machine (the lease lapsed before the renewal ran).
        assert (await store.claim("s", "k", "fp", "o1", 2.0)).claimed
        # Renewed from another thread's own event loop, as the keeper does.
        renewed: list[bool] = []

        def renew() -> None:
            async def go() -> None:
                renewed.append(await keeper.renew("s", "k", "o1", 10))
                await keeper.aclose()

            asyncio.run(go())

        thread = threading.Thread(target=renew)
        thread.start()
        await anyio.to_thread.run_sync(thread.join, 10)
        assert renewed == [True]
        await anyio.sleep(2.1)  # past the first lease: the renewal held it
        record = await store.get("s", "k")
        assert record is not None and record.status is Status.IN_PROGRESS
    finally:
        await store.aclose()


async def test_blocking_tool_keeps_its_lease_on_the_cluster(redis_cluster: LocalCluster) -> None:
    """A tool that blocks the event loop for 3 leases: the keeper thread renews it meanwhile,
    so a second instance sees the call in progress rather than running it again."""
    url = redis_cluster.url
    prefix = _prefix()
    store = RedisStore.from_url(url, prefix=prefix)
    other = RedisStore.from_url(url, prefix=prefix)
    engine = Engine(store)
    seen: list[Any] = []

    def look() -> None:
        async def go() -> None:
            seen.append(await other.get(scope_hash(), "blocking"))
            await other.aclose()

        time.sleep(1.0)  # lease is 0.4 s: without renewals the record would be gone
        asyncio.run(go())

    async def run() -> Outcome:
        watcher = threading.Thread(target=look)
        watcher.start()
        watcher.join(10)  # blocks this loop, as a sync tool does
        return Outcome(result={"content": [{"type": "text", "text": "ok"}], "isError": False})

    async def warm() -> Outcome:
        await asyncio.sleep(0.3)  # past lease / 3: one renewal, on the keeper's own connection
        return Outcome(result={"content": [{"type": "text", "text": "warm"}], "isError": False})

    try:
        # The keeper's thread and its cluster connection start at the first claim's renewal;
        # on a loaded machine that start alone can outlast a 0.4 s lease. Started here first,
        # so the blocking call below tests renewals, not the keeper's start-up.
        warming = ToolCall(name="pay", arguments={}, key="warm", policy=_policy(lease=0.4))
        assert _text(await engine.handle(warming, warm)) == "warm"
        call = ToolCall(name="pay", arguments={}, key="blocking", policy=_policy(lease=0.4))
        assert _text(await engine.handle(call, run)) == "ok"
    finally:
        await engine.aclose()
    assert len(seen) == 1 and seen[0] is not None and seen[0].status is Status.IN_PROGRESS


@pytest.mark.slow
def test_race_32_processes_one_key_then_500_keys_on_the_cluster(
    redis_cluster: LocalCluster,
) -> None:
    prefix = _prefix()
    _race(redis_cluster.url, prefix)
    asyncio.run(_check_race_records(RedisStore.from_url(redis_cluster.url, prefix=prefix)))


# -- slots on the move -----------------------------------------------------------------------------


def _node_ids(cluster: LocalCluster) -> dict[int, tuple[str, bool, int]]:
    """port → (node id, is a primary, slots served) of every live node."""
    client = redis.Redis(port=cluster.ports[0], socket_timeout=2)
    try:
        nodes = client.cluster("nodes")
    finally:
        client.close()
    found = {}
    for address, node in nodes.items():
        port = int(address.rsplit(":", 1)[1].split("@")[0])
        slots = sum(int(s[-1]) - int(s[0]) + 1 for s in node["slots"])
        flags = node["flags"]
        found[port] = (node["node_id"], "master" in flags and "fail" not in flags, slots)
    return found


@pytest.mark.slow
async def test_reshard_while_keyed_calls_flow_executes_each_key_once(
    redis_cluster: LocalCluster,
) -> None:
    """`redis-cli --cluster reshard` migrates slots key by key (MIGRATE; ASK, then MOVED for
    clients) while pairs of tasks send the same keyed calls: no key runs twice, none is lost."""
    store = RedisStore.from_url(redis_cluster.url, prefix=_prefix())
    engine = Engine(store)
    runs: Counter[str] = Counter()
    nodes = _node_ids(redis_cluster)
    primaries = sorted(
        (slots, port, node_id) for port, (node_id, primary, slots) in nodes.items() if primary
    )
    (_, source_port, source), (_, _, target) = primaries[-1], primaries[0]
    done = threading.Event()
    issued: set[str] = set()

    def reshard() -> None:
        try:
            subprocess.run(
                [
                    "redis-cli", "--cluster", "reshard", f"127.0.0.1:{source_port}",
                    "--cluster-from", source, "--cluster-to", target,
                    "--cluster-slots", "1500", "--cluster-yes",
                    "--cluster-pipeline", "10",
                ],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
            )  # fmt: skip
        finally:
            done.set()

    async def caller(pair: int) -> None:
        for i in range(3000):  # bounded; ends once the reshard has ended
            key = f"p{pair}-{i}"
            issued.add(key)

            async def run(key: str = key) -> Outcome:
                runs[key] += 1
                return Outcome(
                    result={"content": [{"type": "text", "text": key}], "isError": False}
                )

            call = ToolCall(name="pay", arguments={"n": i}, key=key, policy=_policy())
            outcome = await engine.handle(call, run)
            if outcome.error is not None:
                assert outcome.error["data"]["type"] == "idempotency_key_in_progress", outcome
            if done.is_set():
                return

    try:
        mover = threading.Thread(target=reshard)
        mover.start()
        with anyio.fail_after(150):
            await asyncio.gather(*(caller(p // 2) for p in range(8)))  # two tasks per key
        await anyio.to_thread.run_sync(mover.join, 30)
        moved = _node_ids(redis_cluster)
        assert moved[source_port][2] == nodes[source_port][2] - 1500, "slots really moved"
        assert len(issued) > 200, "calls flowed during the reshard"
        assert max(runs.values()) == 1 and set(runs) == issued
        for key in sorted(issued):  # and every one replays its own outcome afterwards
            again = await engine.handle(
                ToolCall(
                    name="pay", arguments={"n": int(key.split("-")[1])}, key=key, policy=_policy()
                ),
                lambda: pytest.fail("ran again"),  # type: ignore[arg-type,return-value]
            )
            assert _text(again) == key
    finally:
        await engine.aclose()


# -- failover --------------------------------------------------------------------------------------


async def _until_available(operation: Any, seconds: float = 20.0) -> Any:
    """`operation()` retried while the cluster elects a new primary (bounded)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await operation()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            await anyio.sleep(0.2)


@pytest.mark.slow
async def test_wait_mode_completion_survives_failover_of_its_primary(
    redis_cluster: LocalCluster,
) -> None:
    """With wait_replicas=1 a completion the store acknowledged is on a replica too: SIGKILL its
    primary, the replica takes over, and the key replays. The promoted primary then has no
    replica, so a WAIT-mode claim there is refused (and left free), not silently unreplicated."""
    prefix = _prefix()
    store = RedisStore.from_url(redis_cluster.url, prefix=prefix, wait_replicas=1, wait_timeout=1)
    victim = 0
    try:
        for i in range(20):
            assert (await store.claim("s", f"k{i}", "fp", "o1", 30)).claimed
            assert await store.complete("s", f"k{i}", "o1", b'"paid"', 300, fingerprint="fp")
        victim = redis_cluster.primary_of(store.key_name("s", "k0"))
        redis_cluster.procs[victim].send_signal(signal.SIGKILL)
        redis_cluster.procs[victim].wait(5)
        await anyio.to_thread.run_sync(
            lambda: redis_cluster.wait_ok(deadline=time.monotonic() + 30)
        )
        for i in range(20):  # every acknowledged completion replays from the new primaries
            claim = await _until_available(lambda i=i: store.claim("s", f"k{i}", "fp", "o2", 30))
            assert not claim.claimed and claim.existing is not None
            assert claim.existing.status is Status.COMPLETED and claim.existing.outcome == b'"paid"'
        # The shard that lost its primary has no replica now: WAIT cannot be satisfied there.
        strict = RedisStore.from_url(
            redis_cluster.live_url, prefix=prefix, wait_replicas=1, wait_timeout=0.2
        )
        try:
            orphan = next(
                f"n{i}" for i in range(1000)
                if _orphaned(redis_cluster, strict.key_name("s", f"n{i}"))
            )  # fmt: skip
            with pytest.raises(StoreUnavailableError, match="replicas"):
                await strict.claim("s", orphan, "fp", "o3", 30)
            assert await strict.get("s", orphan) is None, "the unreplicated claim was released"
        finally:
            await strict.aclose()
    finally:
        await store.aclose()
        # Leave six live nodes: the killed one comes back as the new primary's replica.
        if victim and redis_cluster.procs[victim].poll() is not None:
            redis_cluster.start_node(victim)
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_replicas(deadline=time.monotonic() + 30)
            )
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_ok(deadline=time.monotonic() + 30)
            )


def _orphaned(cluster: LocalCluster, key: bytes) -> bool:
    """True when `key`'s primary has no connected replica."""
    client = redis.Redis(port=cluster.primary_of(key), socket_timeout=1)
    try:
        return int(client.info("replication").get("connected_slaves", 0)) == 0
    finally:
        client.close()


def _primary_and_replica(cluster: LocalCluster, key: bytes) -> tuple[int, int]:
    """The primary serving `key` and a live replica of it, as the primary's own view shows them.
    After an earlier test's failover the gossip may still list the old topology for a moment:
    wait (bounded) until the primary sees a replica that is not flagged failed."""
    deadline = time.monotonic() + 30
    cluster.wait_ok(deadline=deadline)
    cluster.wait_replicas(deadline=deadline)
    while True:
        victim = cluster.primary_of(key)
        nodes = redis.Redis(port=victim, socket_timeout=2).cluster("nodes")
        victim_id = next(
            n["node_id"] for a, n in nodes.items() if a.split("@")[0].endswith(f":{victim}")
        )
        replicas = [
            int(a.split("@")[0].rsplit(":", 1)[1]) for a, n in nodes.items()
            if n["master_id"] == victim_id and "fail" not in n["flags"]
        ]  # fmt: skip
        if replicas:
            return victim, replicas[0]
        assert time.monotonic() < deadline, f"primary {victim} shows no live replica"
        time.sleep(0.05)


@pytest.mark.slow
async def test_without_wait_a_failover_can_lose_an_acknowledged_completion(
    redis_cluster: LocalCluster,
) -> None:
    """What asynchronous replication loses, made deterministic: the replica's link to its
    primary is cut and cannot come back (it AUTHs as a user the primary lacks), so nothing
    written afterwards reaches it. A completion the store reported written is gone once that
    replica takes over, and the key would run again. WAIT mode refuses instead."""
    prefix = _prefix()
    plain = RedisStore.from_url(redis_cluster.url, prefix=prefix)
    waiting = RedisStore.from_url(
        redis_cluster.url, prefix=prefix, wait_replicas=1, wait_timeout=0.3
    )
    victim, replica_port = await anyio.to_thread.run_sync(
        lambda: _primary_and_replica(redis_cluster, plain.key_name("s", "lost"))
    )
    primary = redis.Redis(port=victim, socket_timeout=2)
    replica = redis.Redis(port=replica_port, socket_timeout=2)
    try:
        # AUTH as a user the primary does not have: the replica can never resync.
        replica.config_set("masteruser", "nobody-at-all")
        replica.config_set("masterauth", "not-the-password")
        primary.client_kill_filter(_type="replica")
        deadline = time.monotonic() + 10
        while int(primary.info("replication")["connected_slaves"]) != 0:
            assert time.monotonic() < deadline, "the replica link did not drop"
            await anyio.sleep(0.01)
        refused = next(  # a key of the same shard
            f"r{i}" for i in range(1000)
            if redis_cluster.primary_of(plain.key_name("s", f"r{i}")) == victim
        )  # fmt: skip
        with pytest.raises(StoreUnavailableError, match="0 of the 1 replicas"):
            await waiting.claim("s", refused, "fp", "o0", 30)
        assert (await plain.claim("s", "lost", "fp", "o1", 30)).claimed
        assert await plain.complete("s", "lost", "o1", b'"paid"', 300, fingerprint="fp")
        redis_cluster.procs[victim].send_signal(signal.SIGKILL)
        redis_cluster.procs[victim].wait(5)
        await anyio.to_thread.run_sync(
            lambda: redis_cluster.wait_ok(deadline=time.monotonic() + 30)
        )
        again = await _until_available(lambda: plain.claim("s", "lost", "fp", "o2", 30))
        assert again.claimed, "the acknowledged completion was lost: the tool would run again"
    finally:
        replica.config_set("masteruser", "")
        replica.config_set("masterauth", "")
        primary.close()
        replica.close()
        await plain.aclose()
        await waiting.aclose()
        if redis_cluster.procs[victim].poll() is not None:
            redis_cluster.start_node(victim)
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_replicas(deadline=time.monotonic() + 30)
            )
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_ok(deadline=time.monotonic() + 30)
            )


@pytest.mark.slow
async def test_failover_to_a_replica_with_an_evicting_policy_refuses_claims(
    redis_cluster: LocalCluster,
) -> None:
    """The replicas are set to allkeys-lru after the store read the policy
    (and the periodic re-read is an hour away); a failover changes the topology, and the next
    claims read the policy again and are refused."""
    store = RedisStore.from_url(redis_cluster.url, prefix=_prefix(), policy_recheck=3600)
    victim = 0
    replicas: list[int] = []

    def set_policy(ports: list[int], policy: str) -> None:
        for port in ports:
            client = redis.Redis(port=port, socket_timeout=1)
            try:
                client.config_set("maxmemory-policy", policy)
            except redis.RedisError:
                pass
            finally:
                client.close()

    try:
        assert (await store.claim("s", "before", "fp", "o", 30)).claimed
        # A connection to a node not used yet also re-reads the policy (it may be another
        # server): warm one up to every primary first, so that only the failover can.
        for i in range(48):
            assert (await store.claim("s", f"warm-{i}", "fp", "o", 30)).claimed
        for port, proc in redis_cluster.procs.items():
            if proc.poll() is None:
                client = redis.Redis(port=port, socket_timeout=1)
                if client.info("replication")["role"] == "slave":
                    replicas.append(port)
                client.close()
        set_policy(replicas, "allkeys-lru")
        assert (await store.claim("s", "still-before", "fp", "o", 30)).claimed
        victim = redis_cluster.primary_of(store.key_name("s", "k"))
        redis_cluster.procs[victim].send_signal(signal.SIGKILL)
        redis_cluster.procs[victim].wait(5)
        deadline = time.monotonic() + 30
        refused = ""
        i = 0
        while time.monotonic() < deadline and not refused:
            i += 1
            try:
                await store.claim("s", f"after-{i}", "fp", "o", 30)
            except StoreUnavailableError as exc:
                if "allkeys-lru" in str(exc):
                    refused = str(exc)
            await anyio.sleep(0.1)
        assert refused, "the failover to an allkeys-lru replica went unnoticed"
    finally:
        await store.aclose()
        set_policy([p for p in redis_cluster.procs if p != victim], "noeviction")
        if victim and redis_cluster.procs[victim].poll() is not None:
            redis_cluster.start_node(victim)
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_replicas(deadline=time.monotonic() + 30)
            )
            await anyio.to_thread.run_sync(
                lambda: redis_cluster.wait_ok(deadline=time.monotonic() + 30)
            )
