"""A keyed call whose client cancels or disconnects still finishes and records its outcome."""

from __future__ import annotations

from typing import Any

import anyio

from idemtools.server.adapters import SDK2

from .harness import App, error_type, make_app, memory_wire


async def _wait_started(app: App, tool: str = "slow") -> None:
    with anyio.fail_after(10):
        while app.count(tool) == 0:
            await anyio.sleep(0.01)


async def _settled(wire: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Retry like a client would until the original is no longer in progress (bounded)."""
    with anyio.fail_after(10):
        while True:
            reply: dict[str, Any] = await wire.call(params)
            if error_type(reply) != "idempotency_key_in_progress":
                return reply
            await anyio.sleep(reply["error"]["data"]["retryAfterMs"] / 1000)


async def test_cancelled_call_finishes_and_is_replayed() -> None:
    app = make_app()
    app.gate = anyio.Event()
    params = {"name": "slow", "arguments": {"seconds": 1}, "idempotencyKey": "k-cancel"}
    async with memory_wire(app) as wire:
        await wire.send({"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": params})
        await _wait_started(app)
        await wire.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": "c1", "reason": "client gave up"},
            }
        )
        await anyio.sleep(0.1)
        app.gate.set()  # the tool completes after the cancellation
        retry = await _settled(wire, params)
    assert retry["result"]["content"][0]["text"] == "slow done #1"
    assert app.count("slow") == 1
    # Never answered twice: mcp 2 leaves a cancelled request unanswered; mcp 1 answers it once,
    # itself, when the cancellation arrives.
    answers = wire.answers("c1")
    if SDK2:
        assert answers == []
    else:
        assert [a["error"]["message"] for a in answers] == ["Request cancelled"]


async def test_disconnected_client_gets_the_replay_on_a_new_connection() -> None:
    app = make_app()
    app.gate = anyio.Event()
    params = {"name": "slow", "arguments": {"seconds": 1}, "idempotencyKey": "k-drop"}
    gate = app.gate

    async def open_gate_later() -> None:
        await anyio.sleep(0.3)
        gate.set()

    async with anyio.create_task_group() as tg, memory_wire(app) as wire:
        await wire.send({"jsonrpc": "2.0", "id": "d1", "method": "tools/call", "params": params})
        await _wait_started(app)
        tg.start_soon(open_gate_later)
        # Leaving the block cancelled the connection's server loop; the shielded call went on
        # until the tool returned, and recorded its outcome.
    async with memory_wire(app) as wire:
        retry = await _settled(wire, params)
    assert retry["result"]["content"][0]["text"] == "slow done #1"
    assert app.count("slow") == 1
