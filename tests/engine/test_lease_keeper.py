"""The lease keeper on its own: renewal off the caller's event loop, retry, idle exit, close."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from idemtools.engine import lease_keeper
from idemtools.engine.lease_keeper import Lease, LeaseKeeper
from idemtools.stores import MemoryStore
from idemtools.stores.base import Status

pytestmark = pytest.mark.sdk_free

LEASE = 0.3
# For the tests that expect a claim to survive: the keeper renews every third of it, so a
# keeper thread starved by a loaded machine still has two thirds of a second to spare.
ROOMY = 1.0


class Events:
    def __init__(self) -> None:
        self.lost: list[Lease] = []
        self.errors: list[BaseException] = []

    def keeper(self, store: Any) -> LeaseKeeper:
        return LeaseKeeper(
            store,
            on_lost=self.lost.append,
            on_error=lambda _held, exc: self.errors.append(exc),
        )


async def _claim(store: MemoryStore, key: str, owner: str = "o1", lease: float = LEASE) -> None:
    assert (await store.claim("s", key, "fp", owner, lease)).claimed


def _status_from_another_thread(store: MemoryStore, key: str) -> Status | None:
    found: list[Status | None] = []

    def look() -> None:
        record = asyncio.run(store.get("s", key))
        found.append(None if record is None else record.status)

    thread = threading.Thread(target=look)
    thread.start()
    thread.join()
    return found[0]


async def test_renews_while_the_event_loop_is_blocked() -> None:
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    await _claim(store, "k", lease=ROOMY)
    held = keeper.hold("s", "k", "o1", ROOMY)
    held.claimed = True
    time.sleep(ROOMY * 2.5)  # noqa: ASYNC251 - the blocked loop under test
    # Two and a half leases later, with this loop never free, the claim is still held.
    assert _status_from_another_thread(store, "k") is Status.IN_PROGRESS
    keeper.drop(held)
    keeper.close()
    assert events.lost == [] and events.errors == []


async def test_nothing_is_renewed_after_drop() -> None:
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    await _claim(store, "k")
    held = keeper.hold("s", "k", "o1", LEASE)
    keeper.drop(held)
    await asyncio.sleep(LEASE * 1.5)
    assert await store.get("s", "k") is None  # expired: nobody renewed it
    assert keeper.live == 0
    keeper.close()


async def test_a_claim_taken_by_another_owner_is_reported_lost_once() -> None:
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    await _claim(store, "k", owner="other")
    held = keeper.hold("s", "k", "mine", LEASE)
    held.claimed = True
    await asyncio.sleep(LEASE)
    assert events.lost == [held]
    assert keeper.live == 0  # no longer renewed
    keeper.close()


async def test_unconfirmed_hold_is_not_a_loss() -> None:
    # Held before the claim is sent: "not held" then only means the claim has not landed yet.
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    held = keeper.hold("s", "k", "o1", ROOMY)
    await asyncio.sleep(ROOMY * 0.2)
    await _claim(store, "k", lease=ROOMY)
    held.claimed = True
    await asyncio.sleep(ROOMY * 1.5)
    assert events.lost == []
    assert (await store.get("s", "k")) is not None
    keeper.drop(held)
    keeper.close()


class Flaky:
    """A MemoryStore whose first renewals fail, to see how soon the keeper tries again."""

    kind = "flaky"

    def __init__(self, failures: int) -> None:
        self.inner = MemoryStore()
        self.failures = failures
        self.attempts: list[float] = []

    def for_lease_keeper(self) -> Flaky:
        return self

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        self.attempts.append(time.monotonic())
        if self.failures:
            self.failures -= 1
            raise ConnectionError("store restarting")
        return await self.inner.renew(scope, key, owner, lease)

    async def aclose(self) -> None:
        return None


async def test_failed_renewal_is_retried_after_a_tenth_of_the_lease() -> None:
    store, events = Flaky(failures=2), Events()
    keeper = events.keeper(store)
    assert (await store.inner.claim("s", "k", "fp", "o1", LEASE)).claimed
    held = keeper.hold("s", "k", "o1", LEASE)
    held.claimed = True
    await asyncio.sleep(LEASE * 0.9)
    keeper.drop(held)
    keeper.close()
    assert len(events.errors) == 2
    first, second, third = store.attempts[:3]
    # lease/3 to the first try; then retries after lease/10, not another lease/3
    assert second - first < LEASE / 3 and third - second < LEASE / 3
    assert (await store.inner.get("s", "k")) is not None  # renewed in time after all


class NoKeeperConnection(MemoryStore):
    """A store that cannot give the keeper a connection: renewals go through the caller."""

    def for_lease_keeper(self) -> None:  # type: ignore[override]
        return None


async def test_without_a_keeper_connection_renewal_uses_the_callers_loop() -> None:
    store, events = NoKeeperConnection(), Events()
    keeper = events.keeper(store)
    await _claim(store, "k", lease=ROOMY)
    held = keeper.hold("s", "k", "o1", ROOMY)
    held.claimed = True
    await asyncio.sleep(ROOMY * 1.5)  # this loop is free: the renewals it runs keep the claim
    assert (await store.get("s", "k")) is not None
    keeper.drop(held)
    keeper.close()
    assert events.lost == []


async def test_the_thread_ends_when_idle_and_starts_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lease_keeper, "IDLE_EXIT", 0.2)
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    keeper.drop(keeper.hold("s", "k", "o1", LEASE))
    assert any(t.name == "idemtools-lease-keeper" for t in threading.enumerate())
    deadline = time.monotonic() + 5
    while keeper._thread is not None:
        assert time.monotonic() < deadline, "the idle keeper thread did not end"
        await asyncio.sleep(0.05)
    await _claim(store, "k2", lease=ROOMY)
    held = keeper.hold("s", "k2", "o1", ROOMY)
    held.claimed = True
    await asyncio.sleep(ROOMY * 1.5)
    assert (await store.get("s", "k2")) is not None  # a new thread renews it
    keeper.drop(held)
    keeper.close()


async def test_close_stops_the_thread() -> None:
    store, events = MemoryStore(), Events()
    keeper = events.keeper(store)
    held = keeper.hold("s", "k", "o1", LEASE)
    thread = keeper._thread
    assert thread is not None
    keeper.close()
    assert not thread.is_alive()
    keeper.drop(held)
    after = keeper.hold("s", "k", "o1", LEASE)  # after close: accepted, never renewed
    assert keeper.live == 0 and not after.done
