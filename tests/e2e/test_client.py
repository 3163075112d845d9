"""idemtools.client against a real in-memory SDK client session, on the installed mcp line."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

import idemtools
from idemtools.client import NO_RETRY, RetryPolicy, advertises_idempotency, call_tool, new_key
from idemtools.errors import ConflictError, InProgressError, KeyInvalidError
from idemtools.server.adapters import SDK2

from .harness import App, make_app


@contextlib.asynccontextmanager
async def session_for(app: App) -> AsyncIterator[Any]:
    if SDK2:
        from mcp.client import Client

        async with Client(app.server, mode="legacy") as client:
            yield client
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(app.server._mcp_server) as s:
            yield s


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_new_keys_are_new_operations_and_capability_read() -> None:
    app = make_app()
    async with session_for(app) as session:
        assert await advertises_idempotency(session)
        a = await call_tool(session, "charge", {"amount": 3}, idempotency_key=new_key())
        b = await call_tool(session, "charge", {"amount": 3}, idempotency_key=new_key())
    assert text_of(a) == "charged 3 usd #1" and text_of(b) == "charged 3 usd #2"  # new keys


async def test_same_key_replays() -> None:
    app = make_app()
    key = new_key()
    async with session_for(app) as session:
        a = await call_tool(session, "charge", {"amount": 3}, idempotency_key=key)
        b = await call_tool(session, "charge", {"amount": 3}, idempotency_key=key)
    assert text_of(a) == text_of(b) and app.count("charge") == 1


async def test_conflict_is_never_retried() -> None:
    app = make_app()
    async with session_for(app) as session:
        await call_tool(session, "charge", {"amount": 3}, idempotency_key="k-c")
        with pytest.raises(ConflictError):
            await call_tool(
                session,
                "charge",
                {"amount": 4},
                idempotency_key="k-c",
                retry=RetryPolicy(attempts=5),
            )
    assert app.count("charge") == 1


async def test_invalid_key_raises_typed_error() -> None:
    app = make_app()
    async with session_for(app) as session:
        with pytest.raises(KeyInvalidError):
            await call_tool(session, "charge", {"amount": 3}, idempotency_key="x" * 300)


async def test_in_progress_is_retried_after_retry_after_ms() -> None:
    app = make_app()
    app.gate = anyio.Event()
    gate = app.gate
    results: dict[str, Any] = {}
    async with session_for(app) as session:

        async def original() -> None:
            results["first"] = await call_tool(
                session, "slow", {"seconds": 1}, idempotency_key="k-p", retry=NO_RETRY
            )

        async def open_gate_later() -> None:
            await anyio.sleep(0.5)
            gate.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(original)
            with anyio.fail_after(10):
                while app.count("slow") == 0:
                    await anyio.sleep(0.01)
            with pytest.raises(InProgressError):
                await call_tool(
                    session, "slow", {"seconds": 1}, idempotency_key="k-p", retry=NO_RETRY
                )
            tg.start_soon(open_gate_later)
            retried = await call_tool(
                session,
                "slow",
                {"seconds": 1},
                idempotency_key="k-p",
                retry=RetryPolicy(attempts=20),
            )
    assert text_of(retried) == text_of(results["first"])
    assert app.count("slow") == 1


async def test_timeout_retry_with_same_key_runs_once() -> None:
    # The first answer is "lost" (read timeout while the tool runs); the retry with the same
    # key waits out in_progress and gets the one execution's answer.
    app = make_app()
    async with session_for(app) as session:
        result = await call_tool(
            session,
            "slow",
            {"seconds": 0.6},
            idempotency_key="k-t",
            retry=RetryPolicy(attempts=20, timeout=0.2, initial_delay=0.05, max_delay=0.2),
        )
    assert text_of(result) == "slow done #1"
    assert app.count("slow") == 1


async def test_transport_loss_reconnects_with_the_same_key() -> None:
    app = make_app()
    sessions: list[Any] = []
    async with contextlib.AsyncExitStack() as stack:

        async def connect() -> Any:
            session = await stack.enter_async_context(session_for(app))
            sessions.append(session)
            if len(sessions) == 1:  # the first connection dies before the call
                raise anyio.BrokenResourceError
            return session

        key = new_key()
        result = await call_tool(
            connect, "charge", {"amount": 9}, idempotency_key=key, retry=RetryPolicy(attempts=3)
        )
        again = await call_tool(connect, "charge", {"amount": 9}, idempotency_key=key)
    assert len(sessions) == 3  # second attempt reconnected; the later call connected anew
    assert text_of(result) == text_of(again) == "charged 9 usd #1"
    assert app.count("charge") == 1


async def test_attempts_are_bounded() -> None:
    async def never() -> Any:
        raise ConnectionError("down")

    with anyio.fail_after(10), pytest.raises(ConnectionError):
        await call_tool(
            never,
            "charge",
            {"amount": 1},
            idempotency_key="k-b",
            retry=RetryPolicy(attempts=3, max_delay=0.01),
        )


def _plain_server(answers: list[tuple[int, str, Any] | None]) -> tuple[Any, list[int]]:
    """A server without idemtools whose tool `op` answers `answers` in turn (None: a result);
    an answer is sent as a JSON-RPC error with that code, message and data."""
    calls: list[int] = []

    def next_answer() -> tuple[int, str, Any] | None:
        calls.append(1)
        return answers[min(len(calls), len(answers)) - 1]

    if SDK2:
        from mcp.shared.exceptions import MCPError

        from .harness import _Server

        server = _Server("plain")

        @server.tool()
        async def op() -> str:
            answer = next_answer()
            if answer is not None:
                raise MCPError(*answer)
            return f"done #{len(calls)}"

        return server, calls
    else:
        # mcp 1.x turns whatever a tool raises into an isError result: answer the request itself.
        from mcp import types as types1
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import McpError

        lowlevel: Any = Server("plain")

        async def call(req: Any) -> Any:
            answer = next_answer()
            if answer is not None:
                code, message, data = answer
                raise McpError(types1.ErrorData(code=code, message=message, data=data))
            text = types1.TextContent(type="text", text=f"done #{len(calls)}")
            return types1.ServerResult(types1.CallToolResult(content=[text]))

        lowlevel.request_handlers[types1.CallToolRequest] = call
        return lowlevel, calls


@contextlib.asynccontextmanager
async def _plain_session(server: Any) -> AsyncIterator[Any]:
    if SDK2:
        from mcp.client import Client

        async with Client(server, mode="legacy") as client:
            yield client
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(server) as s:
            yield s


_FAST = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.02)


@pytest.mark.parametrize(
    "answer",
    [(-32800, "Request cancelled", None), (-32000, "Connection closed", None)],
    ids=["request-cancelled", "connection-closed"],
)
async def test_sdk_codes_for_a_lost_answer_are_retried_with_the_same_key(answer: Any) -> None:
    # mcp 2.3 answers an in-flight request with -32800 on cancellation and -32000 at shutdown
    # while the server's execution goes on: the outcome is unknown, so the same key again.
    server, calls = _plain_server([answer, None])
    async with _plain_session(server) as session:
        result = await call_tool(
            session, "op", {}, idempotency_key="k-sdk", retry=_FAST, require_capability=False
        )
    assert text_of(result) == "done #2" and len(calls) == 2


@pytest.mark.parametrize(
    ("code", "data"),
    [
        (-31052, None),  # idemtools' conflict code, without idemtools' data.type
        (-32052, {"type": "other"}),  # a conflict code in the reserved -320xx block
        (-31051, {"type": "not_idempotency_key_in_progress", "retryAfterMs": 1}),
    ],
)
async def test_refusals_are_told_apart_by_data_type_only(code: int, data: Any) -> None:
    # A tool's own JSON-RPC error is a definite answer whatever its code: raised, not retried,
    # and never taken for an idemtools refusal.
    server, calls = _plain_server([(code, "the tool's own error", data)])
    async with _plain_session(server) as session:
        with pytest.raises(Exception) as caught:
            await call_tool(
                session, "op", {}, idempotency_key="k-own", retry=_FAST, require_capability=False
            )
    assert not isinstance(caught.value, idemtools.RefusedError)
    assert len(calls) == 1


async def test_a_refusal_is_recognised_by_data_type_whatever_its_code() -> None:
    server, calls = _plain_server(
        [(4242, "conflict", {"type": "idempotency_key_conflict", "idempotencyKey": "k-t"})]
    )
    async with _plain_session(server) as session:
        with pytest.raises(ConflictError):
            await call_tool(
                session, "op", {}, idempotency_key="k-t", retry=_FAST, require_capability=False
            )
    assert len(calls) == 1
