"""A small payments MCP server, written the way a tool author would, made safe to retry.

    python examples/payments_server.py                      # stdio (what MCP hosts launch)
    python examples/payments_server.py --http 8765          # streamable HTTP on 127.0.0.1
    python examples/payments_server.py --http 8765 --stateless
    python examples/payments_server.py --conformance        # plus the conformance fixture tools

Store: the one IDEMTOOLS_STORE names, e.g. `sqlite:///tmp/pay.db` or `redis://127.0.0.1:6379/0`
(several instances must share one); without it the default for the transport: on stdio a SQLite
file in the user's state directory (a host may start a new server process for a retry), on HTTP
the in-memory store. `IDEMTOOLS_STORE=memory://` keeps stdio in memory.
Over HTTP, send `Authorization: Bearer demo-<your name>`: records are scoped per caller.

It runs on whichever mcp line is installed: `MCPServer` on 2.x, `FastMCP` on 1.x.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from typing import Any

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from idemtools import idempotent, install, shared
from idemtools.conformance import add_fixture_tools

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment,attr-defined,unused-ignore]


class CallerToken(AccessToken):
    """mcp releases before 1.30 have no `subject` on `AccessToken`; a verifier adds it.

    idemtools scopes by the token's subject, never by its client id (one app, many users).
    """

    subject: str | None = None
    claims: dict[str, Any] | None = None


class DemoTokens:
    """Over HTTP, callers authenticate with `Authorization: Bearer demo-<name>`.

    A stand-in for a real OAuth token verifier: idemtools scopes records per authenticated
    caller (`by_auth_subject`), so two callers reusing one key never see each other's results.
    """

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token.startswith("demo-") or len(token) <= 5:
            return None
        name = token[5:]
        return CallerToken(
            token=token,
            client_id=f"demo-{name}",
            scopes=["payments"],
            subject=name,
            claims={"iss": "https://payments.example"},
        )


_auth: dict[str, Any] = {"issuer_url": "https://payments.example", "resource_server_url": None}
if "validate_token_resource" in AuthSettings.model_fields:
    _auth["validate_token_resource"] = False
server = Server("payments", token_verifier=DemoTokens(), auth=AuthSettings(**_auth))

# The side effects a retry must not repeat. A real server would call a payment provider.
LEDGER: list[dict[str, Any]] = []


@server.tool()
@idempotent(retention=timedelta(hours=24), lease=timedelta(seconds=30))
async def charge(amount: int, currency: str = "usd") -> str:
    """Charge a card. Not naturally idempotent: each execution moves money."""
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")
    LEDGER.append({"amount": amount, "currency": currency, "at": time.time()})
    return f"charged {amount} {currency} (charge #{len(LEDGER)})"


@server.tool()
@idempotent(retention=timedelta(hours=1), lease=timedelta(seconds=10))
async def slow_transfer(amount: int, seconds: float = 1.0) -> str:
    """A transfer that takes a while, so a duplicate can arrive while it still runs."""
    await anyio.sleep(seconds)
    LEDGER.append({"amount": amount, "currency": "usd", "at": time.time()})
    return f"transferred {amount} (entry #{len(LEDGER)})"


@server.tool()
@idempotent(retention=timedelta(minutes=10), scope=shared)
async def announce(message: str) -> str:
    """Post to a shared channel: one namespace for every caller (explicit opt-in)."""
    return f"announced: {message}"


@server.tool()
async def ledger() -> dict[str, Any]:
    """Read-only: how many charges ran. No @idempotent: keyed calls get the server default."""
    return {"charges": len(LEDGER), "total": sum(entry["amount"] for entry in LEDGER)}


installation = install(server)  # the store: IDEMTOOLS_STORE, else the default for the transport


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP")
    parser.add_argument("--stateless", action="store_true", help="stateless HTTP")
    parser.add_argument(
        "--conformance",
        action="store_true",
        help="add the fixture tools `idemtools conformance` needs (test builds only)",
    )
    args = parser.parse_args(argv)
    if args.conformance:
        add_fixture_tools(server)
    if args.http is None:
        server.run()
        return
    print(f"payments server on http://127.0.0.1:{args.http}/mcp", file=sys.stderr)
    if hasattr(server, "_mcp_server"):  # mcp 1.x FastMCP: transport options live in settings
        settings: Any = server.settings
        settings.host = "127.0.0.1"
        settings.port = args.http
        settings.stateless_http = args.stateless
        settings.json_response = args.stateless
        server.run(transport="streamable-http")
    else:
        server.run(  # type: ignore[call-overload]
            transport="streamable-http",
            host="127.0.0.1",
            port=args.http,
            stateless_http=args.stateless,
            json_response=args.stateless,
        )


if __name__ == "__main__":
    main()
