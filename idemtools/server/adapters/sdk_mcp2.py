"""Typed accessors for the mcp 2.x internals idemtools relies on, and their install-time probe.

Every read of a private or undocumented part of mcp 2.x goes through this module, so that a
release that renames one is caught by `probe()` when `install()` runs (`InstallError` naming
it). Public API is used wherever the release has it (`ServerSession.client_params`, the
dispatch context's `transport`); what is left is listed in `INTERNALS`.

Two internals exist only on a live session: the session's `Connection` (`per_session` keys on
it) and the write stream of the dispatcher serving it (how an in-memory or stdio connection is
told apart). They are probed through the constructors that set them, and `connection()` /
`outbound()` fail closed at a keyed call, with the same message, should a session lack them.
"""

# Imports follow the assert, so that mypy checks them on this SDK line's run only.
# ruff: noqa: E402
from __future__ import annotations

from ..._sdk import SDK2

assert SDK2, "imported on mcp 2.x only"

import importlib.metadata
import inspect
import sys
from typing import Any

from mcp.client import _memory as client_memory
from mcp.server import runner as _runner
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.server.session import ServerSession
from mcp.shared import jsonrpc_dispatcher as _jsonrpc

from ._contact import Internal, changed, set_by, sets_attribute
from ._contact import probe as _probe

__all__ = [
    "INTERNALS",
    "SDK",
    "called_from_sdk_memory",
    "connection",
    "lowlevel_of",
    "outbound",
    "probe",
    "stateless_http",
    "token_verifier_set",
    "tool_manager",
    "write_stream",
]

SDK = f"mcp {importlib.metadata.version('mcp')}"

_MEMORY_FILES = ("mcp/client/_memory.py", "mcp/shared/memory.py")
"""The SDK's in-memory transports, which call `Server.run`: their calls are local ("memory")."""

_NO_SERVER_REQUESTS = getattr(_runner, "_NoServerRequestsDispatchContext", None)
_JSONRPC_CONTEXT = getattr(_jsonrpc, "_JSONRPCDispatchContext", None)


def _has_field(cls: Any, name: str) -> bool:
    return isinstance(cls, type) and name in inspect.get_annotations(cls)


INTERNALS: tuple[Internal, ...] = (
    Internal(
        "mcp.server.lowlevel.Server.server_info_stamp", lambda: hasattr(Server, "server_info_stamp")
    ),
    set_by(lambda: ServerSession.__init__, "mcp.server.session.ServerSession._connection"),
    set_by(lambda: ServerSession.__init__, "mcp.server.session.ServerSession._request_outbound"),
    Internal(
        "mcp.server.runner._NoServerRequestsDispatchContext._inner",
        lambda: _has_field(_NO_SERVER_REQUESTS, "_inner"),
    ),
    Internal(
        "mcp.shared.jsonrpc_dispatcher._JSONRPCDispatchContext._dispatcher",
        lambda: _has_field(_JSONRPC_CONTEXT, "_dispatcher"),
    ),
    set_by(
        lambda: _jsonrpc.JSONRPCDispatcher.__init__,
        "mcp.shared.jsonrpc_dispatcher.JSONRPCDispatcher._write_stream",
    ),
    Internal(
        "mcp.client._memory calls Server.run (the in-memory transport)",
        lambda: sets_attribute(client_memory.InMemoryTransport._connect, "run"),
    ),
)


def probe(server: Any, lowlevel: Server[Any]) -> None:
    """Raise `InstallError` naming the first internal this mcp release lacks or changed: the
    instance's own attributes first, then the classes' (`INTERNALS`)."""
    _probe(
        SDK,
        (
            Internal(
                "mcp.server.lowlevel.Server.middleware",
                lambda: isinstance(lowlevel.middleware, list),
            ),
            Internal("mcp.server.lowlevel.Server.lifespan", lambda: callable(lowlevel.lifespan)),
        ),
    )
    if isinstance(server, MCPServer):
        _probe(
            SDK,
            (
                Internal(
                    "mcp.server.mcpserver.MCPServer._tool_manager",
                    lambda: (
                        callable(server._tool_manager.get_tool)
                        and callable(server._tool_manager.list_tools)
                    ),
                ),
                Internal(
                    "mcp.server.mcpserver.MCPServer._lowlevel_server",
                    lambda: server._lowlevel_server is lowlevel,
                ),
                Internal(
                    "mcp.server.mcpserver.MCPServer._token_verifier",
                    lambda: hasattr(server, "_token_verifier"),
                ),
            ),
        )
    _probe(SDK, INTERNALS)


def lowlevel_of(server: Any) -> Server[Any] | None:
    """The low-level `Server` that dispatches for `server`, if it is an mcp 2.x server."""
    if isinstance(server, Server):
        return server
    if isinstance(server, MCPServer):
        lowlevel = server._lowlevel_server
        return lowlevel if isinstance(lowlevel, Server) else None
    return None


def tool_manager(server: Any) -> Any:
    """MCPServer's tool manager (its tools and the functions behind them); None elsewhere."""
    return server._tool_manager if isinstance(server, MCPServer) else None


def token_verifier_set(server: Any) -> bool:
    return isinstance(server, MCPServer) and server._token_verifier is not None


def stateless_http(server: Any) -> bool:
    """MCPServer's default for `stateless_http=`: its settings carry none on 2.x (the HTTP app
    builders take it as an argument, which `_serving` reads), so stateful."""
    return False


def connection(session: Any) -> Any:
    """The `Connection` a request's `ServerSession` belongs to (one per client connection)."""
    try:
        return session._connection
    except AttributeError:
        raise changed(SDK, "mcp.server.session.ServerSession._connection") from None


def outbound(session: Any) -> Any:
    """The per-request dispatch context of `session`; the modern era's wrapper unwrapped."""
    try:
        found = session._request_outbound
    except AttributeError:
        raise changed(SDK, "mcp.server.session.ServerSession._request_outbound") from None
    if _NO_SERVER_REQUESTS is not None and isinstance(found, _NO_SERVER_REQUESTS):
        found = found._inner
    return found


def write_stream(context: Any) -> Any:
    """The write stream of the JSON-RPC dispatcher behind a dispatch context, else None."""
    if _JSONRPC_CONTEXT is None or not isinstance(context, _JSONRPC_CONTEXT):
        return None
    try:
        return context._dispatcher._write_stream
    except AttributeError:
        raise changed(
            SDK, "mcp.shared.jsonrpc_dispatcher.JSONRPCDispatcher._write_stream"
        ) from None


def called_from_sdk_memory(depth: int) -> bool:
    """Whether the caller `depth` frames up is one of the SDK's in-memory transports."""
    caller = sys._getframe(depth + 1).f_code.co_filename.replace("\\", "/")
    return caller.endswith(_MEMORY_FILES)
