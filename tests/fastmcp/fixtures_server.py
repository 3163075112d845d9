"""A standalone FastMCP 4.x server with only the conformance fixtures, over stdio:
`python fixtures_server.py [--no-install] [--with-own-tool]`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fastmcp import FastMCP

import idemtools
from idemtools.conformance import add_fixture_tools

server = FastMCP("fastmcp-fixtures")


@server.tool
def theirs(x: int) -> str:
    """A tool of the server's own, next to the fixtures."""
    return f"theirs {x}"


add_fixture_tools(server)
if "--no-install" not in sys.argv:
    idemtools.install(server)

if __name__ == "__main__":
    server.run(show_banner=False)
