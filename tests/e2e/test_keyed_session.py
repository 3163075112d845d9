"""KeyedSession against a real idemtools server over a transport that loses answers.

Every test counts what the server's tools really executed: without KeyedSession a retry after a
lost answer runs the tool twice; with it, once.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from idemtools import IdempotencyNotSupportedError
from idemtools.client.keyed_session import KeyedSession, RetryKeys, classify

from .harness import LINE, _Server, make_app
from .lossy import Loss, lossy_session, read_timeout

if LINE == 2:
    from mcp.shared.exceptions import MCPError as SDK_ERROR
else:
    from mcp.shared.exceptions import McpError as SDK_ERROR  # type: ignore[attr-defined,no-redef]

LOST = read_timeout(0.3)  # how long the client waits for the answer that never comes


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def data_type(exc: BaseException) -> Any:
    data = getattr(getattr(exc, "error", None), "data", None)
    return data.get("type") if isinstance(data, dict) else None


async def retry_once(session: Any, name: str, args: dict[str, Any], again: dict[str, Any]) -> Any:
    """What every retrying client does: the answer is lost, so call again."""
    with pytest.raises(SDK_ERROR):
        await session.call_tool(name, args, read_timeout_seconds=LOST)
    return await session.call_tool(name, again)


async def test_without_keyed_session_a_lost_answer_runs_twice() -> None:
    app = make_app()
    async with lossy_session(app.server) as session:
        result = await retry_once(session, "charge", {"amount": 5}, {"amount": 5})
    assert text_of(result) == "charged 5 usd #2"
    assert app.count("charge") == 2  # the double charge KeyedSession prevents


async def test_with_keyed_session_a_lost_answer_runs_once() -> None:
    app = make_app()
    async with lossy_session(app.server) as session:
        keyed = KeyedSession(session)
        # The retry spells the same arguments differently: equal canonically, so the same key.
        result = await retry_once(keyed, "charge", {"amount": 5}, {"amount": 5.0})
    assert text_of(result) == "charged 5 usd #1"  # the first execution's answer, replayed
    assert app.count("charge") == 1
    assert len(keyed.retry_keys) == 0  # definite now: the key is forgotten


async def test_a_different_call_after_a_lost_answer_is_a_new_operation() -> None:
    app = make_app()
    async with lossy_session(app.server) as session:
        keyed = KeyedSession(session)
        result = await retry_once(keyed, "charge", {"amount": 5}, {"amount": 6})
    assert text_of(result) == "charged 6 usd #2"
    assert app.count("charge") == 2
    assert len(keyed.retry_keys) == 1  # the lost one's key waits for its own retry


async def test_after_a_definite_answer_an_equal_call_is_a_new_operation() -> None:
    app = make_app()
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session)
        a = await keyed.call_tool("charge", {"amount": 5})
        b = await keyed.call_tool("charge", {"amount": 5})
        # An isError result is definite too: the tool ran and said so.
        e1 = await keyed.call_tool("fails", {"reason": "x"})
        await keyed.call_tool("fails", {"reason": "x"})
    assert (text_of(a), text_of(b)) == ("charged 5 usd #1", "charged 5 usd #2")
    assert e1.isError if LINE == 1 else e1.is_error
    assert app.count("charge") == 2 and app.count("fails") == 2


async def test_in_progress_is_waited_out_with_the_same_key() -> None:
    app = make_app()
    app.gate = anyio.Event()
    gate = app.gate
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session)
        with pytest.raises(SDK_ERROR):  # times out while the tool still runs: unknown
            await keyed.call_tool("slow", {"seconds": 1}, read_timeout_seconds=LOST)

        async def open_gate_later() -> None:
            await anyio.sleep(0.4)
            gate.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(open_gate_later)
            with anyio.fail_after(10):
                # in_progress answers (retryAfterMs) are waited out inside call_tool.
                result = await keyed.call_tool("slow", {"seconds": 1})
    assert text_of(result) == "slow done #1"
    assert app.count("slow") == 1


async def test_in_progress_wait_is_bounded_and_keeps_the_key() -> None:
    app = make_app()
    app.gate = anyio.Event()
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session, in_progress_wait=0.3)
        with pytest.raises(SDK_ERROR):
            await keyed.call_tool("slow", {}, read_timeout_seconds=LOST)
        with anyio.fail_after(5), pytest.raises(SDK_ERROR) as caught:
            await keyed.call_tool("slow", {})
        assert data_type(caught.value) == "idempotency_key_in_progress"
        app.gate.set()
        with anyio.fail_after(10):
            result = await keyed.call_tool("slow", {})
    assert text_of(result) == "slow done #1" and app.count("slow") == 1


async def test_a_cancelled_call_leaves_its_key_for_the_retry() -> None:
    app = make_app()
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session)
        with anyio.move_on_after(0.2):  # a framework's own timeout cancels the call
            await keyed.call_tool("slow", {"seconds": 0.6})
        with anyio.fail_after(10):
            result = await keyed.call_tool("slow", {"seconds": 0.6})
    assert text_of(result) == "slow done #1" and app.count("slow") == 1


async def test_a_retry_on_another_session_shares_the_keys() -> None:
    app = make_app()
    keys = RetryKeys()
    async with lossy_session(app.server) as first:
        with pytest.raises(SDK_ERROR):
            await KeyedSession(first, retry_keys=keys).call_tool(
                "charge", {"amount": 7}, read_timeout_seconds=LOST
            )
    async with lossy_session(app.server, Loss(drop=0)) as second:  # reconnected
        result = await KeyedSession(second, retry_keys=keys).call_tool("charge", {"amount": 7})
    assert text_of(result) == "charged 7 usd #1" and app.count("charge") == 1


async def test_the_window_bounds_reuse() -> None:
    app = make_app()
    async with lossy_session(app.server) as session:
        keyed = KeyedSession(session, window=0)
        result = await retry_once(keyed, "charge", {"amount": 5}, {"amount": 5})
    assert text_of(result) == "charged 5 usd #2"  # past the window: a new operation


async def test_explicit_keys_override_the_rule() -> None:
    app = make_app()
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session, key_for=lambda name, args: f"op-{name}-{args}")
        a = await keyed.call_tool("charge", {"amount": 1})
        b = await keyed.call_tool("charge", {"amount": 1})  # key_for: the same key, a replay
        c = await keyed.call_tool("charge", {"amount": 1}, idempotency_key="mine")
        d = await keyed.call_tool("charge", {"amount": 1}, idempotency_key="mine")
    assert text_of(a) == text_of(b) == "charged 1 usd #1"
    assert text_of(c) == text_of(d) == "charged 1 usd #2"
    assert app.count("charge") == 2


async def test_a_server_without_the_capability_is_refused_unless_told() -> None:
    server = _Server("forgot-install")
    runs: list[int] = []

    @server.tool()
    def charge(amount: int) -> str:
        runs.append(amount)
        return f"charged {amount}"

    async with lossy_session(server, Loss(drop=0)) as session:
        with pytest.raises(IdempotencyNotSupportedError, match="require_capability=False"):
            await KeyedSession(session).call_tool("charge", {"amount": 1})
        assert runs == []
        await KeyedSession(session, require_capability=False).call_tool("charge", {"amount": 1})
    assert runs == [1]


async def test_other_attributes_are_the_wrapped_sessions() -> None:
    app = make_app(advertise_tool_metadata=True)
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session, window=10**6)
        tools = await keyed.list_tools()
        assert {t.name for t in tools.tools} >= {"charge", "slow"}
        assert keyed.send_ping is not None and keyed.wrapped is session
    # The published retention (24 h here) caps the window.
    assert keyed.retry_keys.limit("charge") == 86400
    assert keyed.retry_keys.limit("unlisted") == 10**6


class _Recorder:
    """A stand-in session: records what reaches `call_tool` (the MRTR rule is client-side only)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def call_tool(self, name: str, arguments: Any = None, **kwargs: Any) -> str:
        self.calls.append({"name": name, **kwargs})
        return "ok"


async def test_a_multi_round_trip_continuation_carries_no_key() -> None:
    recorder = _Recorder()
    keyed = KeyedSession(recorder)
    assert await keyed.call_tool("t", {}, request_state="opaque") == "ok"
    assert await keyed.call_tool("t", {}, input_responses={"r": {}}) == "ok"
    assert len(recorder.calls) == 2 and len(keyed.retry_keys) == 0


@pytest.mark.parametrize(
    ("exc", "answered", "sent", "expected"),
    [
        (TimeoutError(), False, True, "unknown"),
        (anyio.ClosedResourceError(), False, True, "unknown"),
        (RuntimeError("not connected"), False, False, "unsent"),
        (RuntimeError("invalid structured content"), True, True, "definite"),
    ],
)
def test_classify_transport_outcomes(exc: Any, answered: bool, sent: bool, expected: str) -> None:
    assert classify(exc, answered=answered, sent=sent) == expected


def _rpc(code: int, data: Any = None) -> BaseException:
    if LINE == 2:
        return SDK_ERROR(code, "m", data)
    from mcp.types import ErrorData

    return SDK_ERROR(ErrorData(code=code, message="m", data=data))  # type: ignore[call-arg,arg-type]


@pytest.mark.parametrize(
    ("code", "data", "expected"),
    [
        (-32001, None, "unknown"),  # 2.x read timeout
        (408, None, "unknown"),  # 1.x read timeout
        (-32800, None, "unknown"),  # request cancelled: the server's execution carries on
        (-32000, None, "unknown"),  # connection closed
        (-31051, {"type": "idempotency_key_in_progress", "retryAfterMs": 5}, "in_progress"),
        (-31060, {"type": "idempotency_store_unavailable"}, "unknown"),
        (-31052, {"type": "idempotency_key_conflict"}, "definite"),
        (-31052, None, "definite"),  # a tool's own error, whatever its code
        (-32602, None, "definite"),
    ],
)
def test_classify_json_rpc_errors(code: int, data: Any, expected: str) -> None:
    assert classify(_rpc(code, data), answered=False, sent=True) == expected


@pytest.mark.skipif(LINE == 1, reason="mcp 2.x Client, both protocol eras")
@pytest.mark.parametrize("mode", ["legacy", "auto"])  # auto: 2026-07-28, server/discover
async def test_a_2x_client_is_wrapped_too(mode: str) -> None:
    from mcp.client import Client

    app = make_app()
    async with Client(app.server, mode=mode) as client:  # type: ignore[arg-type]
        keyed = KeyedSession(client)
        a = await keyed.call_tool("charge", {"amount": 2}, idempotency_key="k-client")
        b = await keyed.call_tool("charge", {"amount": 2}, idempotency_key="k-client")
    assert text_of(a) == text_of(b) == "charged 2 usd #1"  # the key reached the wire
    assert app.count("charge") == 1


def test_a_copy_of_a_keyed_session_is_a_keyed_session() -> None:
    import copy

    keyed = KeyedSession(_Recorder())
    clone = copy.copy(keyed)
    assert clone.wrapped is keyed.wrapped and clone.retry_keys is keyed.retry_keys


async def test_a_retry_that_cannot_be_sent_keeps_the_unknown_key() -> None:
    app = make_app()
    async with lossy_session(app.server) as session:
        keyed = KeyedSession(session)
        with pytest.raises(SDK_ERROR):
            await keyed.call_tool("charge", {"amount": 8}, read_timeout_seconds=LOST)
        broken = KeyedSession(_Recorder(), retry_keys=keyed.retry_keys)  # no session to send on
        with pytest.raises(TypeError):
            await broken.call_tool("charge", {"amount": 8})
        assert len(keyed.retry_keys) == 1  # still the lost call's key
        result = await keyed.call_tool("charge", {"amount": 8})
    assert text_of(result) == "charged 8 usd #1" and app.count("charge") == 1
