"""FastMCP's own in-memory `Client(server)`, both protocol eras: the capability, the SEP's
outcomes, and policies found through `name=` overrides, mounts and `tool_names` renames."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

from typing import Any  # noqa: E402

import anyio  # noqa: E402
import mcp_types  # noqa: E402
import pytest  # noqa: E402
from fastmcp import Client  # noqa: E402

from idemtools import (  # noqa: E402
    ConflictError,
    InProgressError,
    ScopeUnavailableError,
    by_client_id,
    idempotent,
    shared,
)
from idemtools.client import NO_RETRY, advertises_idempotency, call_tool  # noqa: E402
from idemtools.policy import TOOL_META_KEY  # noqa: E402
from tests.fastmcp.app import make_app, text  # noqa: E402

MODES = {"auto": "2026-07-28", "legacy": "2025-11-25"}


async def keyed(client: Any, name: str, arguments: dict[str, Any], key: str) -> Any:
    return await call_tool(client.session, name, arguments, idempotency_key=key, retry=NO_RETRY)


@pytest.mark.parametrize("mode", MODES)
async def test_capability_is_advertised_to_a_fastmcp_client(mode: str) -> None:
    # The client reads the capability through ClientSession alone: the SDK's ToolsCapability
    # (which the server in this process uses too) stays as shipped. The wire proof, from a
    # server process of its own, is in test_example.py.
    # (Another test in this process may have declared the field on purpose: compare, not assume.)
    declared_before = "idempotency" in mcp_types.ToolsCapability.model_fields
    app = make_app()
    assert app.installation.adapter == "fastmcp"
    async with Client(app.server, mode=mode) as client:
        assert client.protocol_version == MODES[mode]
        assert await advertises_idempotency(client.session)
        assert ("idempotency" in mcp_types.ToolsCapability.model_fields) is declared_before


@pytest.mark.parametrize("mode", MODES)
async def test_replay_conflict_error_and_unkeyed(mode: str) -> None:
    app = make_app()
    async with Client(app.server, mode=mode) as client:
        first = await keyed(client, "charge", {"amount": 5}, "k1")
        again = await keyed(client, "charge", {"amount": 5}, "k1")
        assert text(first) == text(again) == "charged 5 (run 1)"
        with pytest.raises(ConflictError):
            await keyed(client, "charge", {"amount": 6}, "k1")
        other = await keyed(client, "charge", {"amount": 5}, "k2")
        assert text(other) == "charged 5 (run 2)"
        failed = await keyed(client, "fail", {"reason": "card"}, "k3")
        replayed = await keyed(client, "fail", {"reason": "card"}, "k3")
        assert failed.is_error and replayed.is_error
        assert text(failed) == text(replayed) and "declined: card" in text(failed)
        await client.call_tool("quote", {"amount": 1})
        await client.call_tool("quote", {"amount": 1})
    assert app.count("charge") == 2
    assert app.count("fail") == 1
    assert app.count("quote") == 2  # unkeyed calls are untouched


async def test_duplicate_of_a_running_call_is_in_progress() -> None:
    app = make_app()
    async with Client(app.server) as client, anyio.create_task_group() as tg:
        done: list[Any] = []

        async def first() -> None:
            done.append(await keyed(client, "slow", {"n": 1}, "busy"))

        tg.start_soon(first)
        with anyio.fail_after(10):
            await app.started.wait()
        with pytest.raises(InProgressError) as refused:
            await keyed(client, "slow", {"n": 1}, "busy")
        assert refused.value.retry_after_ms is not None
        app.gate.set()
    assert text(done[0]) == "slow 1"
    async with Client(app.server) as client:
        assert text(await keyed(client, "slow", {"n": 1}, "busy")) == "slow 1"
    assert app.count("slow") == 1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("tool", "arguments", "answer"),
    [
        ("pay", {"amount": 3}, "paid 3"),  # @server.tool(name="pay") over def charge_card
        ("child_ship", {"order": "o1"}, "shipped o1"),  # mounted with a namespace
        ("child_dispatch", {"order": "o2"}, "sent o2"),  # mounted, renamed by tool_names=
    ],
)
async def test_own_policy_is_found_through_renames_and_mounts(
    mode: str, tool: str, arguments: dict[str, Any], answer: str
) -> None:
    # The default policy (by_client_id) is unavailable without a token: only the tool's own
    # policy (scope=shared) lets this keyed call through.
    app = make_app()
    async with Client(app.server, mode=mode) as client:
        first = await keyed(client, tool, arguments, "m1")
        again = await keyed(client, tool, arguments, "m1")
    assert text(first) == text(again) == f"{answer} (run 1)"
    assert len(app.runs) == 1


async def test_a_tool_without_own_policy_gets_the_default() -> None:
    app = make_app()
    async with Client(app.server) as client:
        with pytest.raises(ScopeUnavailableError):
            await keyed(client, "quote", {"amount": 1}, "q1")
    assert app.count("quote") == 0


async def test_unknown_tool_is_answered_and_never_recorded() -> None:
    app = make_app()
    async with Client(app.server) as client:
        missing = await keyed(client, "later", {}, "u1")
        assert missing.is_error and "Unknown tool" in text(missing)

        @app.server.tool(name="later")
        @idempotent(scope=shared)
        def later() -> str:
            return "now it exists"

        # The rolling deploy added the tool: the same key runs it, no stale "Unknown tool".
        assert text(await keyed(client, "later", {}, "u1")) == "now it exists"
    stats = app.installation.engine.stats
    assert (stats.executions, stats.replays) == (1, 0)


async def test_docs_listing_follows_fastmcp_names_and_mounts() -> None:
    app = make_app()
    tools = {t.name: t for t in await app.installation.tools()}
    assert set(tools) == {"charge", "fail", "slow", "pay", "quote", "child_ship", "child_dispatch"}
    assert tools["pay"].own and tools["pay"].policy.retention == 30 * 60
    assert tools["child_ship"].own and tools["child_ship"].policy.retention == 2 * 3600
    assert tools["child_dispatch"].own and tools["child_dispatch"].policy.retention == 3 * 3600
    assert not tools["quote"].own


async def test_tool_metadata_follows_fastmcp_names_and_mounts() -> None:
    app = make_app(advertise_tool_metadata=True)
    async with Client(app.server) as client:
        listed = {
            tool.name: (tool.meta or {}).get(TOOL_META_KEY) for tool in await client.list_tools()
        }
    assert listed["pay"] == {"retentionSeconds": 1800, "scope": shared.kind, "keySources": ["sep"]}
    assert listed["child_ship"] == {
        "retentionSeconds": 7200,
        "scope": shared.kind,
        "keySources": ["sep"],
    }
    assert listed["child_dispatch"] == {
        "retentionSeconds": 10800,
        "scope": shared.kind,
        "keySources": ["sep"],
    }
    assert listed["quote"] == {
        "retentionSeconds": 86400,
        "scope": by_client_id.kind,
        "keySources": ["sep"],
    }
