"""A black-box SEP-3182 conformance kit for any MCP server, in any language.

`idemtools conformance TARGET` speaks raw JSON-RPC (stdio or streamable HTTP) to a server it did
not build and checks every MUST and SHOULD of SEP-3182 that a client can observe, using four
fixture tools the server exposes (`contract`; a fifth, `sep3182_throw`, is optional). Against a
server without them (one its operator did not write) it runs what needs none (`unfixtured`) and
reports the rest blocked: the run is incomplete, not failed. The report's words (pass, note,
fail, blocked, skip, fixture-error) are defined once, in `report`. The kit's modules import
nothing of idemtools' engine, stores or adapters: a server passes because of what
it answers, never because it runs idemtools. Only `add_fixture_tools`, the server side, imports
the MCP SDK.
"""

from __future__ import annotations

from typing import Any

from .contract import COUNT, FAIL, FIXTURE_TOOLS, OPTIONAL_FIXTURES, RECORD, RECORD_SLOW, THROW

__all__ = [
    "COUNT",
    "FAIL",
    "FIXTURE_TOOLS",
    "OPTIONAL_FIXTURES",
    "RECORD",
    "RECORD_SLOW",
    "THROW",
    "add_fixture_tools",
    "traceability",
]


def add_fixture_tools(server: Any) -> None:
    """Add the conformance fixture tools to `server`, so `idemtools conformance` can test it.

    Works on FastMCP and the low-level `Server` (mcp 1.x), on MCPServer and the low-level
    `Server` (mcp 2.x), and on standalone FastMCP 4.x (`fastmcp`). The tools carry no
    `@idempotent` policy: they take the server's default, which is what a client meets on any
    tool it did not write. Counters live on the server object, one set per server, shared by
    all callers (the scope check needs that).

    On an mcp 1.x low-level `Server`, call it before `idemtools.install()`: that line's
    `tools/call` handler is a single dict entry, and the fixtures wrap whatever is there.

    `sep3182_throw` (a JSON-RPC error with data) is added wherever a tool can answer one: not on
    mcp 1.x FastMCP, which turns every exception a tool raises into an `isError` result; there
    the kit reports the two checks that need it as blocked and says so.

    Ship these tools in test or staging builds, not to production clients: they exist so that a
    black box can count executions.
    """
    from ._server_fixtures import add

    add(server)


def traceability() -> str:
    """The text of `sep-3182.yaml`: every normative SEP sentence mapped to a check id or excluded
    with a reason, in the official MCP conformance suite's format."""
    from importlib.resources import files

    return files(__package__).joinpath("sep-3182.yaml").read_text(encoding="utf-8")
