"""A scope that cannot work on the transport FastMCP serves is warned about at start-up, once
per tool: over its HTTP app (uvicorn) and on stdio (a subprocess)."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from fastmcp import FastMCP  # noqa: E402

import idemtools  # noqa: E402
from idemtools import by_auth_subject, idempotent, per_session, shared  # noqa: E402
from tests.e2e.harness import LEGACY, http_wire, serve_asgi  # noqa: E402


def server_with_scopes() -> Any:
    server: Any = FastMCP("scopes")

    @server.tool
    @idempotent(scope=by_auth_subject)
    def charge(amount: int) -> str:
        return f"charged {amount}"

    @server.tool
    @idempotent(scope=per_session)
    def draft(text: str) -> str:
        return text

    @server.tool
    @idempotent(scope=shared)
    def ping(n: int) -> int:
        return n

    idemtools.install(server)
    return server


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "idemtools" and r.levelno == logging.WARNING and "tool '" in r.getMessage()
    ]


async def test_stateless_http_without_auth_warns_per_tool_at_start_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = server_with_scopes()
    caplog.set_level(logging.WARNING, logger="idemtools")
    asgi = server.http_app(path="/mcp", stateless_http=True, json_response=True)
    with serve_asgi(asgi, "/mcp") as url:
        for _ in range(2):  # several connections: still one warning per tool
            async with http_wire(url, LEGACY, None) as wire:
                assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}
    warned = warnings_of(caplog)
    assert len(warned) == 2, warned
    charge = next(w for w in warned if "'charge'" in w)
    draft = next(w for w in warned if "'draft'" in w)
    assert "by_auth_subject" in charge and "stateless HTTP without authentication" in charge
    assert "token verifier" in charge
    assert "per_session" in draft and "stateful HTTP" in draft


STDIO_SERVER = textwrap.dedent(
    """
    from fastmcp import FastMCP
    import idemtools
    from idemtools import by_client_id, by_auth_subject, idempotent

    server = FastMCP("stdio-scopes")

    @server.tool
    @idempotent(scope=by_client_id)
    def lookup(q: str) -> str:
        return q

    @server.tool
    @idempotent(scope=by_auth_subject)
    def charge(amount: int) -> str:
        return str(amount)

    idemtools.install(server)
    server.run(show_banner=False)
    """
)


def test_by_client_id_on_stdio_warns_at_start_up() -> None:
    done = subprocess.run(
        [sys.executable, "-c", STDIO_SERVER],
        stdin=subprocess.DEVNULL,  # the host closes stdin at once: the server starts and ends
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "4000"},  # rich log handlers: one record, one line
    )
    lines = [line for line in done.stderr.splitlines() if "tool '" in line]
    assert len(lines) == 1, done.stderr
    assert "'lookup'" in lines[0] and "by_client_id" in lines[0] and "stdio" in lines[0]
    assert "scope=by_auth_subject" in lines[0]
