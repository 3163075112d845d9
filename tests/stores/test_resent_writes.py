"""A claim or completion sent twice by its owner is its own success, whoever re-sent it.

The networked stores are driven through `ReplyDropper` (tests/stores/relay.py): the request
reaches the server and runs, its reply is lost with the connection, and the same request is
sent again, by the driver's own retries (a user-built `Redis` or `RedisCluster` client keeps
redis-py's defaults) or by the store's one retry (`from_url` clients, PostgreSQL). Every keyed
call must then run its tool exactly once, no key may stay in progress, and the engine must
never log that its outcome was "not recorded" (the store answered no to its own write).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores.base import Store
from idemtools.stores.postgres import PostgresStore
from idemtools.stores.redis import RedisStore

from ..services import (
    RUN_ID,
    LocalCluster,
    delete_redis_keys,
    drop_postgres_tables,
    host_port,
    need_postgres,
    need_redis,
    with_port,
)
from .relay import DropBudget, ReplyDropper

pytestmark = pytest.mark.services

REDIS_PREFIX = f"idemtools-resent-{RUN_ID}:"
TABLE_PREFIX = f"idemtools_r_{RUN_ID}_"
NOT_RECORDED = "outcome not recorded"


@pytest.fixture(scope="module", autouse=True)
def _cleanup() -> Iterator[None]:
    yield
    delete_redis_keys(REDIS_PREFIX)
    drop_postgres_tables(TABLE_PREFIX)


def _prefix() -> str:
    return f"{REDIS_PREFIX}{uuid.uuid4().hex[:8]}:"


async def _keyed_calls(
    store: Store, caplog: pytest.LogCaptureFixture, *rounds: tuple[int, int]
) -> Counter[str]:
    """For each round (keys, copies): `copies` identical keyed calls at once for each of
    `keys` keys through one engine; then asserts each key ran once, replays its own outcome,
    and nothing was logged lost."""
    engine = Engine(store)
    runs: Counter[str] = Counter()
    policy = Policy.of(lease=5.0, retention=60, scope=shared)

    def call(key: str) -> ToolCall:
        return ToolCall(name="pay", arguments={"key": key}, key=key, policy=policy)

    async def one(key: str) -> Outcome:
        async def run() -> Outcome:
            runs[key] += 1
            await asyncio.sleep(0)
            return Outcome(result={"content": [{"type": "text", "text": f"paid {key}"}]})

        outcome = await engine.handle(call(key), run)
        if outcome.error is not None:
            # A concurrent copy holds the key; or the store failed twice in a row (a lost
            # reply breaks a Cluster client's other connections to that node too): refused,
            # the call not run, so a retry of it is safe.
            kind = outcome.error["data"]["type"]
            assert kind in ("idempotency_key_in_progress", "idempotency_store_unavailable"), kind
        return outcome

    names: list[str] = []
    caplog.set_level(logging.INFO, logger="idemtools")
    try:
        with anyio.fail_after(60):
            for keys, copies in rounds:
                batch = [f"key-{copies}-{i}" for i in range(keys)]
                names += batch
                await asyncio.gather(*(one(key) for key in batch for _ in range(copies)))
            for key in names:  # the client's retry: none is stuck in progress
                again = await one(key)
                assert again.error is None, (key, again.error)
                assert again.result is not None
                assert again.result["content"][0]["text"] == f"paid {key}"
    finally:
        await engine.aclose()
    never_ran = [key for key in names if runs[key] == 0]
    assert not never_ran, f"{len(never_ran)} keys never ran: {never_ran[:5]}"
    assert max(runs.values()) == 1, [k for k, n in runs.items() if n > 1]
    lost = [r.getMessage() for r in caplog.records if NOT_RECORDED in r.getMessage()]
    assert not lost, lost
    return runs


def _evalsha_of(*scripts: str) -> Callable[[bytes], bool]:
    """Matches a request running one of `scripts` (their SHA-1s), alone: a batch the store
    coalesced is retried by the store as a batch, and what one lost reply does to each of
    its operations is the coalescer's own tests' business."""
    shas = [sha.encode() for sha in scripts]
    return lambda data: data.upper().count(b"EVALSHA") == 1 and any(sha in data for sha in shas)


def _lost(store: RedisStore, what: str) -> Callable[[bytes], bool]:
    """Which replies a relay loses: the claims', the completions' or both."""
    claim, complete = store._claim.sha, store._complete.sha
    return _evalsha_of(*{"claim": [claim], "completion": [complete]}.get(what, [claim, complete]))


# -- Redis -------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["claim", "completion"])
@pytest.mark.parametrize("who", ["driver", "store"])
async def test_redis_resent_claims_and_completions(
    who: str, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    """driver: a user-built `Redis` client with redis-py's default retries re-sends (the
    store never knows); store: a `from_url` client (no driver retries), the store re-sends."""
    host, port = host_port(need_redis(), 6379)
    budget = DropBudget(6)
    relay = ReplyDropper((host, port), lambda data: matches(data), budget)
    await relay.start()
    client: Redis | None = None
    if who == "driver":
        client = Redis(host="127.0.0.1", port=relay.port)  # the driver's defaults: retries on
        store = RedisStore(client, prefix=_prefix())
    else:
        store = RedisStore.from_url(f"redis://127.0.0.1:{relay.port}/0", prefix=_prefix())
    matches = _lost(store, what)
    try:
        await _keyed_calls(store, caplog, (12, 1), (12, 4))
    finally:
        await store.aclose()
        if client is not None:
            await client.aclose()
        await relay.stop()
    assert budget.dropped >= 1, "replies were lost on the way"


# -- Redis Cluster -----------------------------------------------------------------------------


async def _cluster_relays(
    cluster: LocalCluster, budget: DropBudget, matches: Callable[[bytes], bool]
) -> dict[int, ReplyDropper]:
    relays = {}
    for port in cluster.ports:
        relays[port] = await ReplyDropper(("127.0.0.1", port), matches, budget).start()
    return relays


@pytest.mark.cluster
@pytest.mark.parametrize("what", ["claim", "completion"])
@pytest.mark.parametrize("who", ["driver", "store"])
async def test_cluster_resent_claims_and_completions(
    who: str, what: str, redis_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """As on one Redis, every node behind a relay (`address_remap` sends the client there)."""
    budget = DropBudget(6)
    relays = await _cluster_relays(redis_cluster, budget, lambda data: matches(data))

    def remap(address: tuple[str, int]) -> tuple[str, int]:
        return ("127.0.0.1", relays[address[1]].port)

    first = relays[redis_cluster.ports[0]].port
    client: RedisCluster | None = None
    if who == "driver":
        client = RedisCluster(host="127.0.0.1", port=first, address_remap=remap)
        store = RedisStore(client, prefix=_prefix())
    else:
        store = RedisStore.from_url(
            f"redis+cluster://127.0.0.1:{first}/0", prefix=_prefix(), address_remap=remap
        )
    matches = _lost(store, what)
    try:
        await _keyed_calls(store, caplog, (12, 1), (12, 4))
    finally:
        await store.aclose()
        if client is not None:
            await client.aclose()
        for relay in relays.values():
            await relay.stop()
    assert budget.dropped >= 1, "replies were lost on the way"


@pytest.mark.cluster
async def test_cluster_300_keys_by_4_identical_calls_each_run_once(
    redis_cluster: LocalCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """What was seen in the field: `RedisStore(RedisCluster(host=…, port=…))`, 300 keys × 4
    concurrent identical calls, the driver re-sending scripts whose replies were lost. Every
    key runs exactly once and replays afterwards; none is stuck in progress."""
    budget = DropBudget(12)
    relays = await _cluster_relays(redis_cluster, budget, lambda data: matches(data))
    client = RedisCluster(
        host="127.0.0.1",
        port=relays[redis_cluster.ports[0]].port,
        address_remap=lambda address: ("127.0.0.1", relays[address[1]].port),
    )
    store = RedisStore(client, prefix=_prefix())
    matches = _lost(store, "both")
    try:
        runs = await _keyed_calls(store, caplog, (300, 4))
    finally:
        await store.aclose()
        await client.aclose()
        for relay in relays.values():
            await relay.stop()
    assert len(runs) == 300
    assert budget.dropped >= 8, "replies were lost on the way"


# -- PostgreSQL --------------------------------------------------------------------------------


async def test_postgres_resent_claims_and_completions(caplog: pytest.LogCaptureFixture) -> None:
    """psycopg never re-sends a statement itself: the store's one retry on a fresh connection
    re-sends the claim and the completion whose replies were lost."""
    url = need_postgres()
    statements = (b"WITH ins AS", b"'c', $")  # the claim; the completion (with a fingerprint)
    budget = DropBudget(4)
    relay = await ReplyDropper(
        host_port(url, 5432),
        lambda data: any(statement in data for statement in statements),
        budget,
    ).start()
    store = PostgresStore.from_url(
        with_port(url, "127.0.0.1", relay.port), table=f"{TABLE_PREFIX}{uuid.uuid4().hex[:8]}"
    )
    try:
        await store.create_schema()
        await _keyed_calls(store, caplog, (12, 1), (12, 4))
    finally:
        await store.aclose()
        await relay.stop()
    assert budget.dropped >= 2, "replies were lost on the way"
