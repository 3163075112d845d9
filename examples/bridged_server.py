"""Tools that are safe to retry for clients that send no idempotencyKey (outside SEP-3182).

    python examples/bridged_server.py        # stdio

`place_order` takes an optional `idempotency_key` argument that a model fills with one value per
order and sends again when it retries. `pay_invoice` derives its key from the invoice and the
amount, for callers that send nothing at all. A client that does send the SEP's
`idempotencyKey` is served by it, as by any idemtools tool.
"""

from __future__ import annotations

from datetime import timedelta

from idemtools import idempotent, install

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment,attr-defined,unused-ignore]

server = Server("orders")
ledger: list[str] = []  # what really happened, once per operation


@server.tool()
@idempotent(key_argument="idempotency_key")
def place_order(item: str, quantity: int) -> str:
    """Order `quantity` of `item`."""
    ledger.append(f"order {quantity} x {item}")
    return f"order #{len(ledger)}: {quantity} x {item}"


@server.tool()
@idempotent(key_from=("invoice_id", "amount"), retention=timedelta(minutes=10))
def pay_invoice(invoice_id: str, amount: float) -> str:
    """Pay `amount` on invoice `invoice_id`."""
    ledger.append(f"paid {amount:g} on {invoice_id}")
    return f"payment #{len(ledger)}: {amount:g} on {invoice_id}"


install(server)

if __name__ == "__main__":
    server.run()
