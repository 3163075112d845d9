"""The client helper's silent mistakes made loud, and per-tool idempotency metadata.

Real SDK sessions over the in-memory transport, on the installed mcp line (both eras on 2.x).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

import idemtools
from idemtools import (
    IdempotencyNotSupportedError,
    InProgressError,
    by_client_id,
    per_session,
    shared,
)
from idemtools.client import (
    NO_RETRY,
    RetryPolicy,
    ToolIdempotency,
    call_tool,
    list_tool_idempotency,
    new_key,
    tool_idempotency,
)
from idemtools.policy import TOOL_META_KEY
from idemtools.server.adapters import SDK2
from idemtools.testing import connect

from .harness import LINE, _Server, make_app

ERAS = ["legacy", "modern"] if LINE == 2 else ["legacy"]

if SDK2:
    from mcp.shared.exceptions import MCPError as SDK_ERROR
else:
    from mcp.shared.exceptions import McpError as SDK_ERROR


@contextlib.asynccontextmanager
async def session_in(server: Any, era: str) -> AsyncIterator[Any]:
    if era == "modern":
        from mcp.client import Client  # type: ignore[attr-defined]  # mcp 2.x only

        async with Client(server) as client:  # 2026-07-28: server/discover, no handshake
            yield client
    else:
        async with connect(server) as session:
            yield session


def bare_server() -> tuple[Any, list[int]]:
    server = _Server("forgot-install")
    runs: list[int] = []

    @server.tool()
    def charge(amount: int) -> str:
        runs.append(amount)
        return f"charged {amount} #{len(runs)}"

    return server, runs


# -- the key is the caller's choice -------------------------------------------------------------


@pytest.mark.parametrize("given", [{}, {"idempotency_key": None}])
async def test_a_call_without_a_key_is_refused_with_the_fix(given: dict[str, Any]) -> None:
    app = make_app()
    async with connect(app.server) as session:
        with pytest.raises(TypeError) as caught:
            await call_tool(session, "charge", {"amount": 1}, **given)
    message = str(caught.value)
    assert "idempotency_key=" in message and "idempotency_key=new_key()" in message
    assert "never makes a key up" in message
    assert app.count("charge") == 0


async def test_a_key_that_is_not_text_is_refused() -> None:
    app = make_app()
    async with connect(app.server) as session:
        with pytest.raises(TypeError, match="idempotency_key must be a str, got int"):
            await call_tool(session, "charge", {"amount": 1}, idempotency_key=7)  # type: ignore[arg-type]
    assert app.count("charge") == 0


# -- capability check ---------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_keyed_call_to_a_server_without_the_capability_is_refused(era: str) -> None:
    server, runs = bare_server()
    async with session_in(server, era) as session:
        with pytest.raises(IdempotencyNotSupportedError) as caught:
            await call_tool(session, "charge", {"amount": 1}, idempotency_key="k")
    error = caught.value
    assert error.tool == "charge"
    assert "does not advertise capabilities.tools.idempotency" in error.message
    assert "a retry may run the tool twice" in error.message
    assert "require_capability=False" in error.message
    assert "idemtools.install(server)" in error.message
    assert runs == []  # refused before anything was sent


@pytest.mark.parametrize("era", ERAS)
async def test_require_capability_false_sends_anyway(era: str) -> None:
    server, runs = bare_server()
    async with session_in(server, era) as session:
        for _ in range(2):
            await call_tool(
                session,
                "charge",
                {"amount": 1},
                idempotency_key="k",
                retry=NO_RETRY,
                require_capability=False,
            )
    assert runs == [1, 1]  # what the refusal protects against: the retry ran again


@pytest.mark.parametrize("era", ERAS)
async def test_a_protected_server_passes_the_check(era: str) -> None:
    app = make_app()
    async with session_in(app.server, era) as session:
        for _ in range(2):
            await call_tool(session, "charge", {"amount": 1}, idempotency_key="k", retry=NO_RETRY)
    assert app.count("charge") == 1


async def test_a_reconnecting_source_is_checked_on_every_new_session() -> None:
    server, runs = bare_server()
    async with contextlib.AsyncExitStack() as stack:

        async def connect_anew() -> Any:
            return await stack.enter_async_context(connect(server))

        with pytest.raises(IdempotencyNotSupportedError):
            await call_tool(connect_anew, "charge", {"amount": 1}, idempotency_key="k")
    assert runs == []


# -- per-tool metadata in tools/list ------------------------------------------------------------


def listed_meta(tools: list[Any]) -> dict[str, Any]:
    return {t.name: (t.meta or {}).get(TOOL_META_KEY) for t in tools}


@pytest.mark.parametrize("era", ERAS)
async def test_tool_metadata_is_published_when_opted_in(era: str) -> None:
    app = make_app(advertise_tool_metadata=True)
    async with session_in(app.server, era) as session:
        everything = await list_tool_idempotency(session)
        charge = await tool_idempotency(session, "charge")
        echo = await tool_idempotency(session, "echo")
        plain = await tool_idempotency(session, "plain")
    assert charge == ToolIdempotency(retention=86400, scope="auth_subject")
    assert echo == ToolIdempotency(retention=86400, scope="shared")
    assert plain == ToolIdempotency(retention=86400, scope="auth_subject")  # server default
    assert set(everything) == {"charge", "slow", "fails", "report", "echo", "plain"}


async def test_tool_metadata_is_off_by_default() -> None:
    app = make_app()
    async with connect(app.server) as session:
        assert await list_tool_idempotency(session) == {}
        assert await tool_idempotency(session, "charge") is None
        tools = await session.list_tools()
    assert set(listed_meta(tools.tools).values()) == {None}


def short_retention_server(**install_options: Any) -> tuple[Any, list[str]]:
    server = _Server("meta")
    runs: list[str] = []
    registry = idemtools.Registry()

    @server.tool()
    @idemtools.idempotent(retention=90.7, scope=per_session, registry=registry)
    def note(text: str) -> str:
        runs.append(text)
        return text

    @server.tool()
    @idemtools.idempotent(retention=1, lease=5, scope=by_client_id | shared, registry=registry)
    async def slow(seconds: float) -> str:
        import anyio

        runs.append("slow")
        await anyio.sleep(seconds)
        return "slow done"

    idemtools.install(server, registry=registry, **install_options)
    return server, runs


async def test_metadata_rounds_retention_down_and_names_scope_kinds() -> None:
    server, _ = short_retention_server(advertise_tool_metadata=True)
    async with connect(server) as session:
        found = await list_tool_idempotency(session)
    assert found == {
        "note": ToolIdempotency(retention=90, scope="session"),
        "slow": ToolIdempotency(retention=1, scope="composite"),
    }


async def test_low_level_server_metadata_keeps_its_own_meta() -> None:
    # The tools/list handler is registered after install(), as a low-level server may do.
    from mcp.server.lowlevel import Server

    own = {"name": "transfer", "inputSchema": {"type": "object"}, "_meta": {"acme/x": 1}}
    if SDK2:
        import mcp_types as types

        server = Server("low")
        idemtools.install(server, advertise_tool_metadata=True)

        async def list_tools2(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=[types.Tool.model_validate(own)])

        server.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools2)
    else:
        from mcp import types as types1

        server = Server("low")
        idemtools.install(server, advertise_tool_metadata=True)
        tool = types1.Tool.model_validate(own)

        async def list_tools1(req: Any) -> Any:
            return types1.ServerResult(types1.ListToolsResult(tools=[tool]))

        server.request_handlers[types1.ListToolsRequest] = list_tools1
    async with connect(server) as session:
        tools = (await session.list_tools()).tools
        info = await tool_idempotency(session, "transfer")
    assert tools[0].meta == {
        "acme/x": 1,
        TOOL_META_KEY: {
            "retentionSeconds": 86400,
            "scope": "auth_subject",
            "keySources": ["sep"],
        },
    }
    assert info == ToolIdempotency(retention=86400, scope="auth_subject")
    if not SDK2:
        assert tool.meta == {"acme/x": 1}  # the server's own Tool object is not edited


async def test_retries_stop_when_the_published_retention_is_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `slow` keeps answers 1 s. Every attempt times out (0.3 s); retries are spaced 0.3 s. The
    # helper knows the retention from tools/list and stops before a retry could re-run it.
    server, runs = short_retention_server(advertise_tool_metadata=True)
    policy = RetryPolicy(attempts=50, timeout=0.3, initial_delay=0.3, max_delay=0.3, multiplier=1)
    async with connect(server) as session:
        assert (await tool_idempotency(session, "slow")) is not None
        # The last error: in_progress (the retries found the first call still running), or
        # the SDK's timeout if a loaded machine stopped it after the first attempt.
        with (
            caplog.at_level(logging.INFO, logger="idemtools.client"),
            pytest.raises((InProgressError, SDK_ERROR)),
        ):
            await call_tool(
                session, "slow", {"seconds": 3}, idempotency_key=new_key(), retry=policy
            )
    retries = [r for r in caplog.records if r.getMessage().startswith("retrying slow")]
    stops = [r for r in caplog.records if r.getMessage().startswith("not retrying slow")]
    assert len(stops) == 1 and "retention (1 s)" in stops[0].getMessage()
    assert 1 <= len(retries) <= 4  # bounded by the retention, not by attempts=50
    assert runs == ["slow"]
