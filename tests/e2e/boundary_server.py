"""A server process for the process-boundary tests: one keyed tool that does its side effect,
then awaits, on whichever server type and runner the command line names.

    python -m tests.e2e.boundary_server KIND RUNNER LEDGER STORE_URL [PORT]

STORE_URL `default`: no `store=`, so the default store for the transport (IDEMTOOLS_STORE first).

KIND: `sdk` (FastMCP on mcp 1.x, MCPServer on mcp 2.x) or `fastmcp` (standalone FastMCP 4.x).
RUNNER: `stdio` (`server.run()`), `http` (`server.run("streamable-http")`, the SDK's own
uvicorn) or `uvicorn` (the server's ASGI app under `uvicorn.run`, its lifespan driving it).

Every execution of `work` appends "<label>\\n" to LEDGER (O_APPEND, whole lines) *before* it
awaits, so a test knows the side effect is done, and counts executions across processes.
Environment: BOUNDARY_GRACE (seconds: `install(shutdown_grace=)`), BOUNDARY_USER_SIGTERM (a
file: install an application SIGTERM handler that appends a line to it).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import anyio

import idemtools
from idemtools import idempotent, shared
from idemtools.stores import from_url

LEASE = 30.0  # far longer than any test waits: a claim left behind would read in_progress


def build(kind: str, ledger: str, store_url: str) -> Any:
    if kind == "fastmcp":
        from fastmcp import FastMCP

        server: Any = FastMCP("boundary-server")
        decorate = server.tool
    else:
        from tests.e2e.harness import _Server

        server = _Server("boundary-server")
        decorate = server.tool()

    @decorate
    @idempotent(lease=LEASE, scope=shared, retention=600)
    async def work(label: str, seconds: float = 0.0) -> str:
        fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{label}\n".encode())
        finally:
            os.close(fd)
        await anyio.sleep(seconds)  # "awaiting an API": the side effect is already done
        return f"done {label} pid {os.getpid()}"

    grace = os.environ.get("BOUNDARY_GRACE")
    options: dict[str, Any] = {"shutdown_grace": float(grace)} if grace else {}
    store = None if store_url == "default" else from_url(store_url)  # default: the transport's
    idemtools.install(server, store=store, **options)
    return server


def _user_handler(path: str) -> None:
    """A SIGTERM handler of the application's own, there before idemtools': it only notes that
    it ran (idemtools must chain to it, once, and must not exit the process in its place)."""

    def note(sig: int, frame: object) -> None:
        with open(path, "a") as f:
            f.write(f"user handler {sig}\n")

    signal.signal(signal.SIGTERM, note)


def main() -> None:
    kind, runner, ledger, store_url = sys.argv[1:5]
    server = build(kind, ledger, store_url)
    # One plain line per record on stderr (the SDKs' rich handlers wrap long lines).
    logging.basicConfig(
        level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", force=True
    )
    if os.environ.get("BOUNDARY_USER_SIGTERM"):
        _user_handler(os.environ["BOUNDARY_USER_SIGTERM"])
    if runner == "stdio":
        if kind == "fastmcp":
            server.run(show_banner=False)
        else:
            server.run()
        return
    port = int(sys.argv[5])
    if runner == "http":
        if kind == "fastmcp":
            server.run("http", host="127.0.0.1", port=port, show_banner=False)
        else:
            from tests.e2e.harness import LINE

            if LINE == 1:
                server.settings.host, server.settings.port = "127.0.0.1", port
                server.run("streamable-http")
            else:
                server.run("streamable-http", host="127.0.0.1", port=port)
        return
    import uvicorn

    app = server.http_app() if kind == "fastmcp" else server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
