"""A server process for the soak test: one keyed tool, some calls blocking past their lease.

    python -m tests.e2e.soak_server PORT LEDGER_FILE   (IDEMTOOLS_STORE names the shared store)

Every execution appends "<label>\\n" to LEDGER_FILE (O_APPEND: whole lines, from any number of
processes), so the test counts executions across the fleet after the run.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import uvicorn

import idemtools
from idemtools import idempotent, shared
from idemtools.server.adapters import SDK2
from idemtools.stores import from_url
from tests.e2e.harness import LINE, _Server

LEASE = 1.5  # longer than a Redis restart plus one renewal interval: see test_soak.py


def build(ledger: str) -> Any:
    kwargs: dict[str, Any] = {"stateless_http": True, "json_response": True} if LINE == 1 else {}
    server = _Server("soak-server", **kwargs)

    @server.tool()
    @idempotent(lease=LEASE, scope=shared, retention=600)
    async def work(label: str, block: float = 0.0) -> str:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{label}\n".encode())
        finally:
            os.close(fd)
        if block:
            time.sleep(block)  # noqa: ASYNC251 - blocks the event loop past the lease on purpose
        return f"done {label}"

    idemtools.install(server, store=from_url(os.environ["IDEMTOOLS_STORE"]))
    if SDK2:
        return server.streamable_http_app(stateless_http=True, json_response=True)
    else:
        return server.streamable_http_app()


def main() -> None:
    port, ledger = int(sys.argv[1]), sys.argv[2]
    uvicorn.run(build(ledger), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
