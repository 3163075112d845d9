"""Servers for the conformance proofs, started as real processes: `python servers.py KIND [...]`.

- `example`: examples/payments_server.py with its `--conformance` flag (the fixture tools).
- `example-no-install`: the same server with `idemtools.install` replaced by a no-op before the
  example is imported: everything else (auth, tools, transports) unchanged.
- `lowlevel`: a low-level `Server` of the installed mcp line, fixtures added, then install().
- `highlevel`: FastMCP (mcp 1.x) or MCPServer (mcp 2.x) with only the fixtures, then install().
  `lowlevel` and `highlevel` take `--no-install`: the same server, idemtools never installed.
- `short-retention`: the example's server kind with only the fixtures, every record kept
  `IDEMTOOLS_TEST_RETENTION` seconds (the server default policy).
- `plain`: a server someone else wrote: FastMCP (mcp 1.x) or MCPServer (mcp 2.x) with one tool,
  `echo {text}`, no fixture tools, no idemtools. `--install` adds idemtools' install();
  `--broken-fixtures` adds the four fixture tools answering "ok" (no count: off-contract).

Extra arguments are the example's: `--http PORT [--stateless]`; `lowlevel` and
`short-retention` serve stdio only.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import idemtools
from idemtools.conformance import add_fixture_tools
from idemtools.server.adapters import SDK2


def lowlevel(argv: list[str]) -> None:
    import anyio
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    server: Any = Server("lowlevel-fixtures")
    add_fixture_tools(server)
    if "--no-install" not in argv:
        idemtools.install(server)

    async def serve() -> None:
        # A low-level server driven by hand declares its local transport (idemtools does this
        # itself only for the SDKs' own stdio entry points).
        with idemtools.local_transport("stdio"):
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)


def highlevel(argv: list[str]) -> None:
    if SDK2:
        from mcp.server.mcpserver import MCPServer as Server
    else:
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment]
    server = Server("highlevel-fixtures")
    add_fixture_tools(server)
    if "--no-install" not in argv:
        idemtools.install(server)
    server.run()


def short_retention() -> None:
    if SDK2:
        from mcp.server.mcpserver import MCPServer as Server
    else:
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment]
    server = Server("short-retention")
    add_fixture_tools(server)
    seconds = float(os.environ.get("IDEMTOOLS_TEST_RETENTION", "2"))
    idemtools.install(server, default_policy=idemtools.Policy.of(retention=seconds))
    server.run()


def plain(argv: list[str]) -> None:
    if SDK2:
        from mcp.server.mcpserver import MCPServer as Server
    else:
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef,assignment]
    server = Server("plain")

    def echo(text: str) -> str:
        """Answer the text it was given."""
        return text

    server.add_tool(echo, name="echo")
    if "--broken-fixtures" in argv:

        def ok(label: str, payload: Any = None) -> str:
            return "ok"

        for name in ("sep3182_record", "sep3182_record_slow", "sep3182_fail", "sep3182_count"):
            server.add_tool(ok, name=name)
    if "--install" in argv:
        idemtools.install(server)
    server.run()


def main(kind: str, argv: list[str]) -> None:
    if kind == "plain":
        return plain(argv)
    if kind == "lowlevel":
        return lowlevel(argv)
    if kind == "highlevel":
        return highlevel(argv)
    if kind == "short-retention":
        return short_retention()
    if kind == "example-no-install":
        idemtools.install = lambda server, **options: None  # type: ignore[assignment,misc]
    elif kind != "example":
        raise SystemExit(f"unknown server kind {kind!r}")
    from examples import payments_server

    payments_server.main(["--conformance", *argv])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
