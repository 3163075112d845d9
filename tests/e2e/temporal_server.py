"""The MCP server the Temporal proofs' activities spawn over stdio, one process per attempt.

    python tests/e2e/temporal_server.py STORE_URL SIDE_EFFECT_LOG

`charge` appends a line to SIDE_EFFECT_LOG (the count of real executions, across processes)
and, when IDEMTOOLS_TEST_KILL_PID is set, SIGKILLs that process (the worker that spawned this
server) before returning: the tool ran, the worker never learns it did. The idempotency
records live in STORE_URL (a SQLite file), so they outlive this process and the worker.
"""

from __future__ import annotations

import os
import signal
import sys
from datetime import timedelta

from idemtools import idempotent, install
from idemtools.stores import from_url

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment,attr-defined,unused-ignore]

STORE, LOG = sys.argv[1], sys.argv[2]

server = Server("temporal-proof")


def _record(line: str) -> int:
    """Append one execution to the log; how many there are now."""
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(line + "\n")
    with open(LOG, encoding="utf-8") as log:
        return sum(1 for _ in log)


@server.tool()
@idempotent(retention=timedelta(hours=1), lease=timedelta(seconds=5))
async def charge(amount: int, currency: str = "usd") -> str:
    """Charge a card: each execution appends to the side-effect log."""
    count = _record(f"{amount} {currency} pid={os.getpid()}")
    victim = os.environ.get("IDEMTOOLS_TEST_KILL_PID")
    if victim:
        os.kill(int(victim), signal.SIGKILL)
    return f"charged {amount} {currency} (execution #{count})"


install(server, store=from_url(STORE))

if __name__ == "__main__":
    server.run()
