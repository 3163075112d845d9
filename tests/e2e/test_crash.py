"""kill -9 a server process in the middle of a keyed call (SEP-3182's stated crash limit).

The key is not stuck: a retry on another instance sees in_progress until the dead owner's lease
runs out, then the call runs again there. Real server processes, a real shared store.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from .harness import LEGACY, error_type, http_wire
from .test_multi_instance import Fleet, _postgres_store, _redis_store, _start, _stop

pytestmark = [pytest.mark.slow, pytest.mark.services]

SLOW_LEASE = 10.0  # examples/payments_server.py: slow_transfer's lease


@pytest.fixture(params=["redis", "postgres"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    shared_store = _redis_store if request.param == "redis" else _postgres_store
    with shared_store() as (store_url, register):
        instances = []
        try:
            for n in range(2):
                instances.append(_start(store_url, tmp_path / f"instance{n + 1}.log"))
            fleet = Fleet(request.param, store_url, instances)
            register(fleet)
            yield fleet
        finally:
            for instance in instances:
                _stop(instance)


async def test_killed_owner_blocks_retries_only_until_its_lease_runs_out(pair: Fleet) -> None:
    key = pair.key()
    params = {
        "name": "slow_transfer",
        "arguments": {"amount": 9, "seconds": 4},
        "idempotencyKey": key,
    }
    doomed, survivor = pair.instances

    async def send_and_lose_the_answer() -> None:
        # The server dies under us: exactly the lost answer.
        with contextlib.suppress(httpx.HTTPError):
            async with http_wire(doomed.url, LEGACY, token="demo-alice") as wire:
                await wire.call(params)

    async with anyio.create_task_group() as tg:
        tg.start_soon(send_and_lose_the_answer)
        await pair.wait_for_record(key)  # instance 1 holds the claim and is running the tool
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(10)
    async with http_wire(survivor.url, LEGACY, token="demo-alice") as wire:
        first_retry = await wire.call(params)
        assert error_type(first_retry) == "idempotency_key_in_progress"
        replies: list[dict[str, Any]] = []
        with anyio.fail_after(SLOW_LEASE + 20):  # the lease, then the 4 s tool: bounded
            while True:
                reply = await wire.call(params)
                replies.append(reply)
                if error_type(reply) != "idempotency_key_in_progress":
                    break
                await anyio.sleep(reply["error"]["data"]["retryAfterMs"] / 1000)
    final = replies[-1]
    assert "result" in final, final
    assert "transferred 9" in final["result"]["content"][0]["text"]
    record = await pair.record(key)
    assert record is not None and record.status.value == "completed"
