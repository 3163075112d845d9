"""`idemtools.testing.assert_protected` on a standalone FastMCP server: it connects with
FastMCP's own in-memory client, passes when `install()` was called and says so when not."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

from datetime import timedelta  # noqa: E402

import pytest  # noqa: E402
from fastmcp import FastMCP  # noqa: E402

from idemtools import idempotent, install, shared  # noqa: E402
from idemtools.testing import NotProtectedError, assert_protected  # noqa: E402


def _server(*, installed: bool) -> tuple[FastMCP, list[int]]:
    server = FastMCP("testing-check")
    runs: list[int] = []

    @server.tool
    @idempotent(retention=timedelta(hours=1), scope=shared)
    async def charge(amount: int) -> str:
        runs.append(amount)
        return f"charged {amount} (run {len(runs)})"

    if installed:
        install(server)
    return server, runs


async def test_a_protected_fastmcp_server_passes_and_the_tool_ran_once() -> None:
    server, runs = _server(installed=True)
    protection = await assert_protected(server, "charge", {"amount": 3})
    assert runs == [3]
    assert protection.first.content[0].text == "charged 3 (run 1)"
    assert protection.retry.content[0].text == "charged 3 (run 1)"


async def test_a_fastmcp_server_without_install_fails_with_the_reason() -> None:
    server, runs = _server(installed=False)
    with pytest.raises(NotProtectedError, match=r"install\(server\)"):
        await assert_protected(server, "charge", {"amount": 3})
    assert runs == []  # the check refuses before any keyed call is sent
