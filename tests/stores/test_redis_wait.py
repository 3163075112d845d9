"""`wait_replicas` on a single Redis (the Cluster case is in test_redis_cluster.py), and the
driver-fault test that decides which AttributeError/TypeError counts as a broken connection.

A private primary with a private replica (`--replicaof`): WAIT is answered by a real replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from idemtools.errors import StoreUnavailableError
from idemtools.stores._redis_cluster import driver_fault
from idemtools.stores.base import Status
from idemtools.stores.redis import RedisStore

from ..services import private_redis

pytestmark = pytest.mark.services


@pytest.fixture(scope="module")
def primary_and_replica() -> Iterator[tuple[str, str]]:
    with private_redis("--repl-diskless-sync-delay", "0") as primary:
        port = primary.rsplit(":", 1)[1].split("/")[0]
        with private_redis("--replicaof", "127.0.0.1", port) as replica:
            client = redis.Redis.from_url(replica, socket_timeout=1)
            deadline = time.monotonic() + 15
            while client.info("replication").get("master_link_status") != "up":
                assert time.monotonic() < deadline, "the private replica never synced"
                time.sleep(0.05)
            client.close()
            yield primary, replica


async def test_acknowledged_claim_and_completion_are_on_the_replica(
    primary_and_replica: tuple[str, str],
) -> None:
    primary, replica = primary_and_replica
    store = RedisStore.from_url(primary, prefix="w:", wait_replicas=1, wait_timeout=2)
    on_replica = RedisStore.from_url(replica, prefix="w:")
    try:
        assert (await store.claim("s", "k", "fp", "o1", 30)).claimed
        # WAIT returned 1: the replica has the claim the moment the store reports it.
        record = await on_replica.get("s", "k")
        assert record is not None and record.status is Status.IN_PROGRESS
        assert await store.complete("s", "k", "o1", b'"paid"', 60, fingerprint="fp")
        record = await on_replica.get("s", "k")
        assert record is not None and record.outcome == b'"paid"'
        # A replay claim writes nothing and waits for nothing it needs.
        again = await store.claim("s", "k", "fp", "o2", 30)
        assert not again.claimed and again.existing is not None
        # The engine's retry of a completion that was under-replicated finds its own record.
        assert await store.complete("s", "k", "o1", b'"paid"', 60, fingerprint="fp")
    finally:
        await store.aclose()
        await on_replica.aclose()


async def test_claim_nobody_replicates_is_released_and_refused() -> None:
    with private_redis() as lonely:  # no replica at all
        store = RedisStore.from_url(lonely, prefix="w:", wait_replicas=1, wait_timeout=0.1)
        try:
            with pytest.raises(StoreUnavailableError, match="0 of the 1 replicas"):
                await store.claim("s", "k", "fp", "o1", 30)
            assert await store.get("s", "k") is None, "released: the call did not run"
        finally:
            await store.aclose()


async def test_completion_nobody_replicates_is_reported_not_silently_accepted() -> None:
    with private_redis() as lonely:
        plain = RedisStore.from_url(lonely, prefix="w:")
        strict = RedisStore.from_url(lonely, prefix="w:", wait_replicas=1, wait_timeout=0.1)
        try:
            assert (await plain.claim("s", "k", "fp", "o1", 30)).claimed
            with pytest.raises(StoreUnavailableError, match="completion reached 0"):
                await strict.complete("s", "k", "o1", b'"x"', 60, fingerprint="fp")
            record = await plain.get("s", "k")  # written on the primary all the same
            assert record is not None and record.status is Status.COMPLETED
        finally:
            await plain.aclose()
            await strict.aclose()


async def test_driver_fault_only_for_errors_raised_inside_the_driver() -> None:
    from redis.asyncio.connection import Connection

    never_connected = Connection()  # its writer is None, as after the concurrent close
    with pytest.raises((AttributeError, redis.exceptions.ConnectionError)) as closed:
        await never_connected._send_packed_command([b"PING\r\n"])
    # redis-py before 8.2 fails there on the missing writer; from 8.2 it says the connection
    # closed (a ConnectionError: the store is unavailable, nothing to tell apart).
    assert driver_fault(closed.value) is isinstance(closed.value, AttributeError)
    with pytest.raises(AttributeError) as inside:  # the same kind of fault, on any release
        Connection.repr_pieces(None)  # type: ignore[arg-type,no-untyped-call]
    assert driver_fault(inside.value)
    with pytest.raises(AttributeError) as ours:
        None.writelines([])  # type: ignore[attr-defined]  # the same message, raised here
    assert not driver_fault(ours.value)
    assert not driver_fault(ValueError("NoneType"))
    assert not driver_fault(TypeError("unsupported operand"))


def test_wait_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="wait_replicas"):
        RedisStore.from_url("redis://127.0.0.1:1/0", wait_replicas=-1)
    with pytest.raises(ValueError, match="wait_timeout"):
        RedisStore.from_url("redis://127.0.0.1:1/0", wait_replicas=1, wait_timeout=0)
