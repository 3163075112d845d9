"""Reconcile: a crash between the payment and its record, settled by asking the provider.

    python examples/reconcile_payments.py            # the demo: crash, restart, retry
    python examples/reconcile_payments.py --serve    # just the server (stdio)

The `charge` tool calls a payment provider that supports lookups by idempotency key (as
Stripe, Adyen and most payment APIs do): the tool passes its own idempotency key on to the
provider. If the server dies after the provider charged the card but before idemtools recorded
the outcome, the retry finds a lapsed claim and, instead of charging again, `reconcile` asks the
provider whether a charge with that key exists. Found: its outcome is recorded and answered.
Not found: the tool runs. The provider here is a JSON file, so the demo needs no account.

The demo starts the server over stdio with a SQLite store (the records outlive the process),
makes the server SIGKILL itself right after the provider charged, starts it again and retries
the same call: one charge at the provider, and the retry is answered with it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from idemtools import LapsedCall, Outcome, idempotent, install, shared
from idemtools.stores import from_url


class Provider:
    """A stand-in payment provider: charges in a JSON file, one per idempotency key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _charges(self) -> dict[str, dict[str, Any]]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def create_charge(self, amount: int, idempotency_key: str) -> dict[str, Any]:
        charges = self._charges()
        if idempotency_key not in charges:  # the provider's own deduplication
            charges[idempotency_key] = {"id": f"ch_{len(charges) + 1}", "amount": amount}
            self.path.write_text(json.dumps(charges))
        return charges[idempotency_key]

    def find_charge(self, idempotency_key: str) -> dict[str, Any] | None:
        """A read: the charge made under this key, if any."""
        return self._charges().get(idempotency_key)


def serve(workdir: Path) -> None:
    try:  # mcp 2.x
        from mcp.server.mcpserver import MCPServer as Server  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # mcp 1.x
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment,attr-defined,unused-ignore]

    server = Server("payments")
    provider = Provider(workdir / "provider.json")

    def receipt(charge: dict[str, Any]) -> str:
        return f"charged {charge['amount']} ({charge['id']})"

    def reconcile(call: LapsedCall) -> Outcome | None:
        # Only reads. None runs the tool: return it only once the provider is sure to know
        # of every charge made under this key (no replication lag), or the card is charged twice.
        # A plain function: it runs in a worker thread, so `reconcile_timeout` bounds even a
        # provider call that blocks (an async one is bounded only at its awaits).
        charge = provider.find_charge(call.key)
        return None if charge is None else Outcome.of_value(receipt(charge))

    @server.tool()
    @idempotent(scope=shared, lease=1, on_lapse=reconcile)
    async def charge(amount: int, idempotency_key: str = "") -> str:
        """Charge a card through the provider, under the call's own idempotency key."""
        made = provider.create_charge(amount, idempotency_key)
        if os.environ.get("RECONCILE_DEMO_CRASH") == "1":
            os.kill(os.getpid(), signal.SIGKILL)  # dies before idemtools records the outcome
        return receipt(made)

    install(server, store=from_url(f"sqlite:///{workdir / 'records.db'}"))
    server.run()


def _ask(workdir: Path, params: dict[str, Any], *, crash: bool) -> dict[str, Any] | None:
    """Start the server over stdio, send one keyed call; its answer, or None if it died."""
    env = {**os.environ, "RECONCILE_DEMO_CRASH": "1" if crash else "0"}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(workdir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(workdir / "server.log").open("a"),
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "reconcile-demo", "version": "0"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params},
    ]
    answer = None
    try:
        for message in messages:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        for line in proc.stdout:
            reply = json.loads(line)
            if reply.get("id") == 2:
                answer = reply
                break
    except BrokenPipeError:
        pass
    finally:
        proc.stdin.close()
        proc.wait(30)
    return answer


def demo() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="idemtools-reconcile-"))
    key = "order-1042"
    params = {
        "name": "charge",
        "arguments": {"amount": 42, "idempotency_key": key},
        "idempotencyKey": key,
    }
    first = _ask(workdir, params, crash=True)
    print(f"1. the server died after the provider charged: answer {first}")
    time.sleep(1.5)  # one lease: the dead server's claim lapses
    retry = _ask(workdir, params, crash=False)
    text = (retry or {}).get("result", {}).get("content", [{}])[0].get("text")
    charges = Provider(workdir / "provider.json")._charges()
    print(f"2. the retry, after a restart: {text!r}")
    print(f"3. charges at the provider: {len(charges)}")
    ok = first is None and text == "charged 42 (ch_1)" and len(charges) == 1
    print("reconciled: one charge, and the retry was answered with it" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]))
    else:
        sys.exit(demo())
