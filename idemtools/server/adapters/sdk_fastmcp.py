"""Typed accessors for the FastMCP 4.x (`fastmcp`) internals idemtools relies on, and their probe.

Every read of a private part of FastMCP goes through this module, so that a release that renames
one is caught by `probe()` when `install()` runs (`InstallError` naming it). Public API is used
wherever FastMCP has it (`get_tool`, `list_tools`, `call_tool(run_middleware=)`, whose absence
`FastMCPTools` reports with its own opt-out); what is left is listed in `INTERNALS`. Imported
only when a FastMCP server is installed on.
"""

# Imports follow the assert, so that mypy checks them on this SDK line's run only.
# ruff: noqa: E402
from __future__ import annotations

from ..._sdk import SDK2

assert SDK2, "imported on mcp 2.x only"

import importlib.metadata
import inspect
import sys
from collections.abc import Callable
from typing import Any

from fastmcp import FastMCP
from fastmcp.client.transports import memory as client_memory
from fastmcp.server import context as _context
from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool

from ._contact import Internal, set_by, sets_attribute
from ._contact import probe as _probe

__all__ = [
    "INTERNALS",
    "SDK",
    "called_from_memory_transport",
    "compose_interceptors",
    "lowlevel_of",
    "mounted",
    "probe",
    "set_transport",
]

SDK = f"fastmcp {importlib.metadata.version('fastmcp')}"

_MEMORY_FILE = "fastmcp/client/transports/memory.py"


INTERNALS: tuple[Internal, ...] = (
    Internal(
        "fastmcp.FastMCP._mcp_server",
        lambda: (
            "_mcp_server" in inspect.get_annotations(FastMCP)
            or sets_attribute(FastMCP.__init__, "_mcp_server")
        ),
    ),
    set_by(lambda: FastMCPProviderTool.__init__, "FastMCPProviderTool._server"),
    set_by(lambda: FastMCPProviderTool.__init__, "FastMCPProviderTool._original_name"),
    Internal(
        "fastmcp.server.context.set_transport / reset_transport",
        lambda: callable(_context.set_transport) and callable(_context.reset_transport),
    ),
    Internal(
        "fastmcp.client.transports.memory calls Server.run (the in-memory transport)",
        lambda: sets_attribute(client_memory.FastMCPTransport.connect_session, "run"),
    ),
)


def probe(server: FastMCP[Any]) -> None:
    """Raise `InstallError` naming the first internal this FastMCP release lacks or changed."""
    _probe(SDK, INTERNALS)
    _probe(SDK, (Internal("FastMCP._mcp_server", lambda: lowlevel_of(server) is not None),))


def lowlevel_of(server: Any) -> Any:
    """The mcp 2.x low-level `Server` a FastMCP server dispatches through, else None."""
    return getattr(server, "_mcp_server", None) if isinstance(server, FastMCP) else None


def mounted(tool: Any) -> tuple[Any, str | None]:
    """(the child server, the tool's name there) when `tool` delegates to a mounted server."""
    if isinstance(tool, FastMCPProviderTool):
        original = tool._original_name
        return tool._server, original if isinstance(original, str) else None
    return None, None


def compose_interceptors(server: Any) -> Callable[..., Any] | None:
    """FastMCP's `_compose_tool_call_interceptors` (releases with extension interceptors)."""
    compose = getattr(server, "_compose_tool_call_interceptors", None)
    return compose if callable(compose) else None


def set_transport(kind: Any) -> Any:
    return _context.set_transport(kind)


def reset_transport(token: Any) -> None:
    _context.reset_transport(token)


def called_from_memory_transport(depth: int) -> bool:
    """Whether the caller `depth` frames up is FastMCP's in-memory `Client(server)` transport."""
    caller = sys._getframe(depth + 1).f_code.co_filename.replace("\\", "/")
    return caller.endswith(_MEMORY_FILE)
