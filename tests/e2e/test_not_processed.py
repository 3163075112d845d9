"""`error.data.notProcessed` over a real server round trip: exactly where the tool provably did not
run for the request (in progress, conflict, invalid key, unauthorized, store unavailable), never
on a replay, recorded errors included (a tool's JSON-RPC error, an outcome too large to keep).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from idemtools.errors import StoreUnavailableError
from idemtools.stores.memory import MemoryStore

from .conftest import Served
from .harness import LINE, error_type, make_app, memory_wire


def flag(reply: dict[str, Any]) -> object:
    """`error.data.notProcessed`, or "absent"."""
    data = reply.get("error", {}).get("data")
    return data.get("notProcessed", "absent") if isinstance(data, dict) else "absent"


async def test_refusals_of_a_request_that_did_not_run_carry_it(served: Served) -> None:
    async with served() as (app, wire):
        app.gate = anyio.Event()
        slow = {"name": "slow", "arguments": {"seconds": 1}, "idempotencyKey": "np-p"}
        async with anyio.create_task_group() as tg:
            tg.start_soon(wire.call, slow)
            with anyio.fail_after(10):
                while app.count("slow") == 0:
                    await anyio.sleep(0.01)
            in_progress = await wire.call(slow)
            app.gate.set()
        replay = await wire.call(slow)
        first = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "np-c"}
        )
        conflict = await wire.call(
            {"name": "charge", "arguments": {"amount": 2}, "idempotencyKey": "np-c"}
        )
        invalid = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": 42}
        )
    assert error_type(in_progress) == "idempotency_key_in_progress"
    assert flag(in_progress) is True and in_progress["error"]["data"]["retryAfterMs"] > 0
    assert error_type(conflict) == "idempotency_key_conflict" and flag(conflict) is True
    assert error_type(invalid) == "idempotency_key_invalid" and flag(invalid) is True
    assert "result" in first and "result" in replay
    assert app.count("slow") == 1 and app.count("charge") == 1


async def test_unauthorized_and_store_unavailable_carry_it() -> None:
    class Down(MemoryStore):
        async def claim(self, *args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailableError("the store is down (test)")

    denied = make_app(authorize=lambda _context: False)
    async with memory_wire(denied) as wire:
        refused = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "np-a"}
        )
    assert error_type(refused) == "idempotency_unauthorized" and flag(refused) is True
    down = make_app(store=Down())
    async with memory_wire(down) as wire:
        unavailable = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "np-s"}
        )
    assert error_type(unavailable) == "idempotency_store_unavailable"
    assert flag(unavailable) is True
    assert denied.runs == [] and down.runs == []


async def test_a_replayed_outcome_too_large_does_not_carry_it() -> None:
    app = make_app(max_outcome_bytes=256)
    async with memory_wire(app) as wire:
        params = {"name": "echo", "arguments": {"value": "x" * 1000}, "idempotencyKey": "np-l"}
        first, again = await wire.call(params), await wire.call(params)
    assert "result" in first  # the first caller gets its answer; the record holds an error
    assert error_type(again) == "idempotency_outcome_too_large"
    assert flag(again) == "absent"
    assert app.count("echo") == 1


@pytest.mark.skipif(LINE != 2, reason="JSON-RPC errors from a tool exist on mcp 2.x")
async def test_a_replayed_recorded_error_never_carries_it() -> None:
    """A tool's own JSON-RPC error that said notProcessed (a proxied refusal, say) is the
    call's recorded outcome: its replay ran nothing new, and says nothing of the kind."""
    from mcp.shared.exceptions import MCPError  # type: ignore[attr-defined]  # mcp 2.x only

    app = make_app()

    @app.server.tool()
    async def guarded(x: int) -> str:
        app.runs.append(("guarded", x))
        raise MCPError(code=-32042, message="busy", data={"x": x, "notProcessed": True})

    async with memory_wire(app) as wire:
        params = {"name": "guarded", "arguments": {"x": 1}, "idempotencyKey": "np-r"}
        first, again = await wire.call(params), await wire.call(params)
    assert first["error"]["data"] == {"x": 1, "notProcessed": True}  # the tool's own words
    assert again["error"]["data"] == {"x": 1}
    assert again["error"]["code"] == -32042 and again["error"]["message"] == "busy"
    assert app.count("guarded") == 1
