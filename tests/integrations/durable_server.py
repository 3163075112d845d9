"""The MCP server of the durable-workflow proofs: `charge` runs once per execution, on the record.

    DURABLE_LEDGER=ledger.jsonl DURABLE_KILL=kill.pid IDEMTOOLS_STORE=sqlite:///s.db \
        python tests/integrations/durable_server.py PORT

Every execution of `charge` appends a line to the ledger file (the side effect a retry must
not repeat). When the kill file holds a pid, the execution that finds it, after its side effect
and before its answer, removes the file and SIGKILLs that process: the worker dies after the
tool ran and before its engine could record the step. Streamable HTTP on 127.0.0.1, so the
server outlives the worker it kills.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

from mcp.server.mcpserver import MCPServer  # type: ignore[import-not-found,unused-ignore]

from idemtools import idempotent, install, shared
from idemtools.stores import from_url

LEDGER = Path(os.environ["DURABLE_LEDGER"])
KILL = Path(os.environ["DURABLE_KILL"])

server = MCPServer("durable-payments")


def _execute(amount: int, currency: str) -> int:
    """The side effect, then the kill if armed; returns this amount's execution count."""
    with LEDGER.open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps({"amount": amount, "currency": currency}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())
    lines = LEDGER.read_text(encoding="utf-8").splitlines()
    try:
        pid = int(KILL.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pid = 0
    if pid:
        KILL.unlink()
        os.kill(pid, signal.SIGKILL)
    return sum(json.loads(line)["amount"] == amount for line in lines)


@server.tool()
@idempotent(retention=timedelta(hours=1), lease=timedelta(seconds=30), scope=shared)
async def charge(amount: int, currency: str = "usd") -> str:
    """Charge a card: each execution is one more line in the ledger (#n: n-th of this amount)."""
    return f"charged {amount} {currency} (charge #{_execute(amount, currency)})"


install(server, store=from_url(os.environ["IDEMTOOLS_STORE"]))

if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"durable payments on http://127.0.0.1:{port}/mcp", file=sys.stderr)
    server.run(transport="streamable-http", host="127.0.0.1", port=port)
