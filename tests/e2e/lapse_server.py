"""A stdio server process for the lapsed-claim tests: keyed tools that append a line to a
ledger (their side effect), one per `on_lapse` choice.

    python -m tests.e2e.lapse_server LEDGER STORE_URL MODE [LEASE]

Tools: `charge_rerun`, `charge_refuse` and `charge_reconcile`, each `(label, seconds=0)`:
append "<label> <pid>" to LEDGER, then await `seconds`. MODE `hang` makes every tool await
for ever instead (after its side effect, or before it for a label starting with "before"),
so that the test can SIGKILL the process inside the tools. The reconcile reads the ledger:
a line for the label is the effect found (the outcome says "reconciled"), none is None; while
LEDGER.down-<label> exists it raises (a provider whose lookup is down).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import anyio

import idemtools
from idemtools import Outcome, idempotent, shared
from idemtools.policy import LapsedCall
from idemtools.stores import from_url


def build(ledger: str, store_url: str, mode: str, lease: float) -> Any:
    from tests.e2e.harness import _Server

    server = _Server("lapse-server")
    book = Path(ledger)

    def reconcile(call: LapsedCall) -> Outcome | None:  # sync: allowed, and it only reads
        # Reads only: did an execution of this label leave its effect?
        label = call.arguments["label"]
        if Path(f"{ledger}.down-{label}").exists():
            raise ConnectionError("the provider's lookup is down")
        lines = book.read_text().split("\n") if book.exists() else []
        if any(line.split(" ")[0] == label for line in lines):
            return Outcome.of_value(f"charged {label} (reconciled)")
        return None

    async def effect(label: str, seconds: float) -> str:
        if mode == "hang" and label.startswith("before"):
            await anyio.sleep_forever()
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{label} {os.getpid()}\n".encode())
        finally:
            os.close(fd)
        if mode == "hang":
            await anyio.sleep_forever()
        await anyio.sleep(seconds)
        return f"charged {label} pid {os.getpid()}"

    options: dict[str, Any] = {"lease": lease, "scope": shared, "retention": 600}

    @server.tool()
    @idempotent(on_lapse="rerun", **options)
    async def charge_rerun(label: str, seconds: float = 0.0) -> str:
        return await effect(label, seconds)

    @server.tool()
    @idempotent(on_lapse="refuse", **options)
    async def charge_refuse(label: str, seconds: float = 0.0) -> str:
        return await effect(label, seconds)

    @server.tool()
    @idempotent(on_lapse=reconcile, **options)
    async def charge_reconcile(label: str, seconds: float = 0.0) -> str:
        return await effect(label, seconds)

    idemtools.install(server, store=from_url(store_url))
    return server


def main() -> None:
    ledger, store_url, mode = sys.argv[1:4]
    lease = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    server = build(ledger, store_url, mode, lease)
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    server.run()


if __name__ == "__main__":
    main()
