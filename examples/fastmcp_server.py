"""A payments server on the standalone FastMCP framework (`fastmcp` 4.x), made safe to retry.

    pip install -e ".[fastmcp]"    # from a checkout of idemtools
    python examples/fastmcp_server.py                   # stdio (what MCP hosts launch)
    python examples/fastmcp_server.py --http 8765       # streamable HTTP on 127.0.0.1

Nothing FastMCP-specific to learn: decorate tools as usual, add `@idempotent` under
`@server.tool`, call `install(server)` once. Renamed tools (`name=`) and tools of mounted
servers keep their own policies. Over HTTP, send `Authorization: Bearer demo-<your name>`:
FastMCP's `auth=` validates it and idemtools scopes records per caller, so two callers
reusing one key never see each other's results.

Store: the one IDEMTOOLS_STORE names, e.g. `sqlite:///tmp/pay.db` or `redis://127.0.0.1:6379/0`
(several instances must share one); without it the default for the transport: on stdio a SQLite
file in the user's state directory (a host may start a new server process for a retry), on HTTP
the in-memory store. `IDEMTOOLS_STORE=memory://` keeps stdio in memory.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.server.auth import AccessToken, TokenVerifier
from fastmcp.server.middleware.caching import ResponseCachingMiddleware

from idemtools import idempotent, install


class DemoTokens(TokenVerifier):
    """`Bearer demo-<name>` is caller `<name>`: a stand-in for a real verifier (JWTVerifier,
    an OAuth provider). What idemtools needs from any of them is the token's subject."""

    async def verify_token(self, token: str) -> AccessToken | None:
        name = token.removeprefix("demo-")
        if not token.startswith("demo-") or not name:
            return None
        return AccessToken(
            token=token,
            client_id="demo-app",
            scopes=[],
            subject=name,
            claims={"iss": "https://demo.example", "sub": name},
        )


server = FastMCP("payments", auth=DemoTokens())
# Caches unkeyed `quote` calls; idemtools keeps keyed calls out of it (they run once, or replay).
server.add_middleware(ResponseCachingMiddleware())

ledger: list[str] = []  # what really ran, in order (a real server writes to its database)


@server.tool
@idempotent(retention=timedelta(hours=24), lease=timedelta(seconds=30))
def charge(amount: int, currency: str) -> str:
    """Charge the customer's card. A retry with the same key replays this answer."""
    ledger.append(f"charge {amount} {currency}")
    return f"charge #{len(ledger)}: {amount} {currency}"


@server.tool(name="refund_payment")
@idempotent(retention=timedelta(hours=72))
def refund(charge_id: int) -> str:
    """Refund a charge; listed as `refund_payment`, with this function's policy."""
    ledger.append(f"refund {charge_id}")
    return f"refund #{len(ledger)} of charge {charge_id}"


@server.tool
def quote(amount: int, currency: str) -> str:
    """A read-only price quote: no side effect, so no policy of its own is needed."""
    return f"{amount} {currency} costs {amount // 100} in fees"


@server.tool(name="ledger")
def show_ledger() -> list[str]:
    """What really executed, in order."""
    return list(ledger)


shipping = FastMCP("shipping")


@shipping.tool
@idempotent(retention=timedelta(hours=24))
def create_label(order: str) -> str:
    """Buy a shipping label; mounted below as `shipping_create_label`."""
    ledger.append(f"label {order}")
    return f"label #{len(ledger)} for {order}"


server.mount(shipping, namespace="shipping")

installation = install(server)  # the store: IDEMTOOLS_STORE, else the default for the transport


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT", help="serve HTTP on 127.0.0.1")
    args = parser.parse_args()
    if args.http:
        server.run("http", host="127.0.0.1", port=args.http, show_banner=False)
    else:
        server.run(show_banner=False)  # stdio


if __name__ == "__main__":
    main()
