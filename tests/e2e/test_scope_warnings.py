"""Scopes that cannot work on the transport served are warned about at start-up, once per tool,
on mcp 1.x FastMCP and mcp 2.x MCPServer: HTTP apps and stdio."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

import idemtools
from idemtools import by_auth_subject, idempotent, per_session, shared
from idemtools.server.adapters import SDK2

from .harness import LEGACY, LINE, http_wire, serve_asgi

if SDK2:
    from mcp.server.mcpserver import MCPServer as Server
else:
    from mcp.server.fastmcp import FastMCP as Server


def server_with_scopes(**kwargs: Any) -> Any:
    server: Any = Server("scopes", **kwargs)

    @server.tool()
    @idempotent(scope=by_auth_subject)
    async def charge(amount: int) -> str:
        return f"charged {amount}"

    @server.tool()
    @idempotent(scope=per_session)
    async def draft(text: str) -> str:
        return text

    @server.tool()
    @idempotent(scope=shared)
    async def ping(n: int) -> int:
        return n

    idemtools.install(server)
    return server


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "idemtools" and r.levelno == logging.WARNING and "tool '" in r.getMessage()
    ]


async def test_stateless_http_without_auth_warns_per_tool(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="idemtools")
    if LINE == 2:
        server = server_with_scopes()
        asgi = server.streamable_http_app(stateless_http=True, json_response=True)
    else:
        server = server_with_scopes(stateless_http=True, json_response=True)
        asgi = server.streamable_http_app()
    with serve_asgi(asgi, "/mcp") as url:
        for _ in range(2):
            async with http_wire(url, LEGACY, None) as wire:
                assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}
    warned = warnings_of(caplog)
    assert len(warned) == 2, warned
    charge = next(w for w in warned if "'charge'" in w)
    draft = next(w for w in warned if "'draft'" in w)
    assert "by_auth_subject" in charge and "stateless HTTP without authentication" in charge
    assert "per_session" in draft and "stateful HTTP" in draft


async def test_stateful_http_warns_only_what_cannot_work_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="idemtools")
    server = server_with_scopes()
    asgi = server.streamable_http_app()
    with serve_asgi(asgi, "/mcp") as url:
        async with http_wire(url, LEGACY, None) as wire:
            assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}
    warned = warnings_of(caplog)
    assert any("'charge'" in w and "HTTP without authentication" in w for w in warned), warned
    drafts = [w for w in warned if "'draft'" in w]
    if LINE == 2:  # 2026-07-28 clients have no session, even on stateful HTTP
        assert len(drafts) == 1 and "2026-07-28" in drafts[0], warned
    else:
        assert drafts == [], warned
    assert len(warned) == 1 + len(drafts)


STDIO_SERVER = textwrap.dedent(
    """
    import sys
    import idemtools
    from idemtools import by_client_id, by_auth_subject, idempotent
    if sys.argv[1] == "2":
        from mcp.server.mcpserver import MCPServer as Server
    else:
        from mcp.server.fastmcp import FastMCP as Server

    server = Server("stdio-scopes")

    @server.tool()
    @idempotent(scope=by_client_id)
    async def lookup(q: str) -> str:
        return q

    @server.tool()
    @idempotent(scope=by_auth_subject)
    async def charge(amount: int) -> str:
        return str(amount)

    idemtools.install(server)
    server.run()
    """
)


def test_by_client_id_on_stdio_warns_at_start_up() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STDIO_SERVER, str(LINE)],
        stdin=subprocess.DEVNULL,  # the host closes stdin at once: the server starts and ends
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "4000"},  # rich log handlers: one record, one line
    )
    lines = [line for line in done.stderr.splitlines() if "tool '" in line]
    assert len(lines) == 1, done.stderr
    assert "'lookup'" in lines[0] and "by_client_id" in lines[0] and "stdio" in lines[0]
