"""Example server for the docs tests: one tool per policy shape, on either mcp line.

It uses its own `Registry`, so importing it twice (the mkdocs plugin re-imports on each build)
or next to other test servers never mixes policies.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from idemtools import (
    CallContext,
    Policy,
    Registry,
    ScopeUnavailableError,
    by_auth_subject,
    idempotent,
    install,
    local_user,
    per_session,
    scope,
)
from idemtools.server.adapters import SDK2

if SDK2:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
else:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server

registry = Registry()


@scope("per tenant (the X-Tenant | header)")
def by_tenant(ctx: CallContext) -> str:
    raise ScopeUnavailableError("no tenant")


server: Any = _Server("fixture-payments")


@server.tool()
@idempotent(
    retention=timedelta(days=7),
    lease=timedelta(minutes=2),
    scope=by_auth_subject,
    transactional=True,
    registry=registry,
)
def charge(amount: int, currency: str) -> str:
    """Charge a card."""
    return f"charged {amount} {currency}"


@server.tool()
@idempotent(retention=5400, lease=30.5, scope=per_session | by_tenant, registry=registry)
def send_email(to: str) -> str:
    """Send one email."""
    return f"sent to {to}"


@server.tool()
def ping() -> str:
    """No policy of its own: gets the server default."""
    return "pong"


install(
    server,
    registry=registry,
    default_policy=Policy.of(retention=timedelta(hours=36), lease=45, scope=local_user),
    mark_replays=True,
)

plain: Any = _Server("no-idemtools")
"""A server without idemtools, for the error paths."""
