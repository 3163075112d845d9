"""Every row of the SEP outcome table over the wire: every transport and era of this mcp line."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from .conftest import Served
from .harness import LINE, error_type, result_text


async def test_capability_is_advertised(served: Served) -> None:
    async with served() as (_app, wire):
        assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}


async def test_first_call_runs_and_retry_replays_identically(served: Served) -> None:
    async with served() as (app, wire):
        params = {"name": "charge", "arguments": {"amount": 42}, "idempotencyKey": "k-1"}
        first = await wire.call(params)
        again = await wire.call(params)
        assert "result" in first and result_text(first) == "charged 42 usd #1"
        assert again["result"] == first["result"]
        assert app.count("charge") == 1


async def test_key_is_not_dropped_by_the_sdk(served: Served) -> None:
    # The failure the SEP prototype hit on mcp 2.0: the SDK silently drops the field, so a
    # "protected" server executes every retry. Three sends, one execution.
    async with served() as (app, wire):
        for _ in range(3):
            await wire.call({"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-d"})
        assert app.count("charge") == 1


async def test_structured_result_replayed(served: Served) -> None:
    async with served() as (app, wire):
        params = {"name": "report", "arguments": {"n": 21}, "idempotencyKey": "k-s"}
        first = await wire.call(params)
        again = await wire.call(params)
        assert first["result"]["structuredContent"] == {"n": 21, "double": 42}
        assert again["result"] == first["result"]
        assert app.count("report") == 1


async def test_error_result_replayed(served: Served) -> None:
    async with served() as (app, wire):
        params = {"name": "fails", "arguments": {"reason": "no funds"}, "idempotencyKey": "k-e"}
        first = await wire.call(params)
        again = await wire.call(params)
        assert first["result"]["isError"] is True
        assert again == {**first, "id": again["id"]}
        assert app.count("fails") == 1


async def test_numbers_compare_as_parsed_json(served: Served) -> None:
    async with served() as (app, wire):
        first = await wire.call(
            {"name": "charge", "arguments": {"amount": 7}, "idempotencyKey": "k-n"}
        )
        again = await wire.call(
            {
                "name": "charge",
                "arguments": {"amount": 7.0, "currency": "usd"},
                "idempotencyKey": "k-n",
            }
        )
        # {"amount": 7.0, "currency": "usd"} is NOT the same arguments object as {"amount": 7}
        assert error_type(again) == "idempotency_key_conflict"
        same = await wire.call(
            {"name": "charge", "arguments": {"amount": 7.0}, "idempotencyKey": "k-n"}
        )
        assert same["result"] == first["result"]
        assert app.count("charge") == 1


@pytest.mark.parametrize(
    "changed",
    [
        {"name": "charge", "arguments": {"amount": 43}},
        {"name": "charge", "arguments": {"amount": 42, "currency": "eur"}},
        {"name": "report", "arguments": {"n": 42}},
    ],
)
async def test_conflict(served: Served, changed: dict[str, Any]) -> None:
    async with served() as (app, wire):
        await wire.call({"name": "charge", "arguments": {"amount": 42}, "idempotencyKey": "k-c"})
        reply = await wire.call({**changed, "idempotencyKey": "k-c"})
        assert error_type(reply) == "idempotency_key_conflict"
        assert reply["error"]["data"]["idempotencyKey"] == "k-c"
        assert len(app.runs) == 1


async def test_in_progress_refused_at_once(served: Served) -> None:
    async with served() as (app, wire):
        app.gate = anyio.Event()
        params = {"name": "slow", "arguments": {"seconds": 1}, "idempotencyKey": "k-p"}
        replies: dict[str, Any] = {}

        async def original() -> None:
            replies["first"] = await wire.call(params)

        async with anyio.create_task_group() as tg:
            tg.start_soon(original)
            with anyio.fail_after(10):
                while app.count("slow") == 0:
                    await anyio.sleep(0.01)
            with anyio.fail_after(5):  # refused at once, never blocked behind the original
                duplicate = await wire.call(params)
            app.gate.set()
        assert error_type(duplicate) == "idempotency_key_in_progress"
        assert duplicate["error"]["code"] == -31051  # outside -32768..-32000 (MCP 2026-07-28)
        assert 0 < duplicate["error"]["data"]["retryAfterMs"] <= 1000
        after = await wire.call(params)
        assert after["result"] == replies["first"]["result"]
        assert app.count("slow") == 1


async def test_refusal_codes_on_the_wire_lie_outside_the_reserved_range(served: Served) -> None:
    # One set of codes for both eras; -32602 only for what JSON-RPC calls invalid params.
    async with served() as (app, wire):
        first = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-codes"}
        )
        conflict = await wire.call(
            {"name": "charge", "arguments": {"amount": 2}, "idempotencyKey": "k-codes"}
        )
        invalid = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": ""}
        )
    assert "result" in first
    assert error_type(conflict) == "idempotency_key_conflict"
    assert conflict["error"]["code"] == -31052
    assert error_type(invalid) == "idempotency_key_invalid"
    assert invalid["error"]["code"] == -32602
    assert app.count("charge") == 1


@pytest.mark.parametrize(
    "key",
    [12, 1.5, True, {"a": 1}, ["k"], "", "x" * 256],
    ids=["int", "float", "bool", "object", "array", "empty", "too-long"],
)
async def test_invalid_keys_refused_before_anything_runs(served: Served, key: Any) -> None:
    async with served() as (app, wire):
        reply = await wire.call(
            {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": key}
        )
        assert error_type(reply) == "idempotency_key_invalid"
        assert app.runs == []


async def test_null_key_is_an_ordinary_call(served: Served) -> None:
    async with served() as (app, wire):
        for _ in range(2):
            reply = await wire.call(
                {"name": "charge", "arguments": {"amount": 5}, "idempotencyKey": None}
            )
            assert "result" in reply
        assert app.count("charge") == 2


async def test_no_key_is_backward_compatible(served: Served) -> None:
    async with served() as (_app, wire):
        a = await wire.call({"name": "charge", "arguments": {"amount": 5}})
        b = await wire.call({"name": "charge", "arguments": {"amount": 5}})
        assert result_text(a) == "charged 5 usd #1" and result_text(b) == "charged 5 usd #2"


async def test_tool_without_policy_gets_the_server_default(served: Served) -> None:
    async with served() as (app, wire):
        params = {"name": "plain", "arguments": {"x": 3}, "idempotencyKey": "k-plain"}
        first, again = await wire.call(params), await wire.call(params)
        assert again["result"] == first["result"]
        assert app.count("plain") == 1


async def test_unknown_tool_outcome_is_recorded_too(served: Served) -> None:
    async with served() as (_app, wire):
        params = {"name": "nope", "arguments": {}, "idempotencyKey": "k-unknown"}
        first, again = await wire.call(params), await wire.call(params)
        first.pop("id")
        again.pop("id")
        assert first == again


@pytest.mark.skipif(LINE != 2, reason="JSON-RPC errors from a tool exist on mcp 2.x")
async def test_jsonrpc_error_replayed() -> None:
    from .harness import make_app, memory_wire, types

    app = make_app()
    from mcp.shared.exceptions import MCPError  # type: ignore[attr-defined]  # mcp 2.x only

    @app.server.tool()
    async def guarded(x: int) -> str:
        app.runs.append(("guarded", x))
        raise MCPError(code=-32042, message="needs approval", data={"x": x})

    async with memory_wire(app) as wire:
        params = {"name": "guarded", "arguments": {"x": 1}, "idempotencyKey": "k-rpc"}
        first, again = await wire.call(params), await wire.call(params)
    assert first["error"]["code"] == -32042 and first["error"]["data"] == {"x": 1}
    assert again["error"] == first["error"]
    assert app.count("guarded") == 1
    assert types.INVALID_PARAMS == -32602
