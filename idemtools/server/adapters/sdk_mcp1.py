"""Typed accessors for the mcp 1.x internals idemtools relies on, and their install-time probe.

Every read of a private or undocumented part of mcp 1.x goes through this module, so that a
release that renames one is caught by `probe()` when `install()` runs (`InstallError` naming
it), not discovered as a server that quietly stopped deduplicating. Public API is preferred
wherever 1.x has one; what is left is listed in `INTERNALS`.
"""

# Imports follow the assert, so that mypy checks them on this SDK line's run only.
# ruff: noqa: E402
from __future__ import annotations

from ..._sdk import SDK2

assert not SDK2, "imported on mcp 1.x only"

import importlib.metadata
import inspect
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.lowlevel.server import Server
from mcp.server.session import ServerSession
from mcp.shared import memory

from ._contact import Internal, sets_attribute
from ._contact import probe as _probe

__all__ = [
    "INTERNALS",
    "SDK",
    "called_from_sdk_memory",
    "guard_dispatch",
    "handshaken",
    "lowlevel_of",
    "probe",
    "request_context",
    "stateless_http",
    "token_verifier_set",
    "tool_manager",
]

SDK = f"mcp {importlib.metadata.version('mcp')}"

Handler = Callable[[Any], Awaitable[Any]]

_MEMORY_FILE = "mcp/shared/memory.py"
"""The SDK's in-memory transport, which calls `Server.run`: its calls are local ("memory")."""


def _dispatch_signature() -> bool:
    params = list(inspect.signature(Server._handle_request).parameters)
    return params[:3] == ["self", "message", "req"] and inspect.iscoroutinefunction(
        Server._handle_request
    )


def _memory_runs_server() -> bool:
    helper = inspect.unwrap(memory.create_connected_server_and_client_session)
    return sets_attribute(helper, "run") and memory.__file__.replace("\\", "/").endswith(
        _MEMORY_FILE
    )


INTERNALS: tuple[Internal, ...] = (
    Internal("mcp.server.lowlevel.Server._handle_request(message, req, ...)", _dispatch_signature),
    Internal(
        "mcp.server.session.ServerSession.client_params",
        lambda: isinstance(ServerSession.client_params, property),
    ),
    Internal("mcp.shared.memory calls Server.run (the in-memory transport)", _memory_runs_server),
)


def probe(server: Any, lowlevel: Server) -> None:
    """Raise `InstallError` naming the first internal this mcp release lacks or changed: the
    instance's own attributes first, then the classes' (`INTERNALS`)."""
    _probe(
        SDK,
        (
            Internal(
                "mcp.server.lowlevel.Server.request_handlers",
                lambda: isinstance(lowlevel.request_handlers, dict),
            ),
            Internal("mcp.server.lowlevel.Server.lifespan", lambda: callable(lowlevel.lifespan)),
        ),
    )
    if isinstance(server, FastMCP):
        _probe(
            SDK,
            (
                Internal(
                    "mcp.server.fastmcp.FastMCP._tool_manager",
                    lambda: (
                        callable(server._tool_manager.get_tool)
                        and callable(server._tool_manager.list_tools)
                    ),
                ),
                Internal(
                    "mcp.server.fastmcp.FastMCP._mcp_server",
                    lambda: server._mcp_server is lowlevel,
                ),
                Internal(
                    "mcp.server.fastmcp.FastMCP._token_verifier",
                    lambda: hasattr(server, "_token_verifier"),
                ),
            ),
        )
    _probe(SDK, INTERNALS)


def lowlevel_of(server: Any) -> Server | None:
    """The low-level `Server` that dispatches for `server`, if it is a 1.x server."""
    if isinstance(server, Server):
        return server
    if isinstance(server, FastMCP):
        lowlevel = server._mcp_server
        return lowlevel if isinstance(lowlevel, Server) else None
    return None


def tool_manager(server: Any) -> Any:
    """FastMCP's tool manager (its tools and the functions behind them); None elsewhere."""
    return server._tool_manager if isinstance(server, FastMCP) else None


def token_verifier_set(server: Any) -> bool:
    return isinstance(server, FastMCP) and server._token_verifier is not None


def stateless_http(server: Any) -> bool:
    return isinstance(server, FastMCP) and bool(server.settings.stateless_http)


def request_context(lowlevel: Server) -> Any:
    """The SDK's context for the request being handled, or None outside one."""
    try:
        return lowlevel.request_context
    except LookupError:
        return None


def handshaken(session: Any) -> bool:
    """A `ServerSession` that completed `initialize` (public `client_params`)."""
    return isinstance(session, ServerSession) and session.client_params is not None


def called_from_sdk_memory(depth: int) -> bool:
    """Whether the caller `depth` frames up is the SDK's in-memory transport."""
    caller = sys._getframe(depth + 1).f_code.co_filename.replace("\\", "/")
    return caller.endswith(_MEMORY_FILE)


def guard_dispatch(lowlevel: Server, wraps: dict[type, Callable[[Handler], Handler]]) -> None:
    """Wrap the handlers of `wraps`' request types where dispatch looks them up.

    Why there, not in the handler dict: `request_handlers` is a plain dict the server's own code
    may edit in any way (`[k] = v`, `update`, `|=`, a new dict), and several of those never
    call a subclass's `__setitem__`. Every request passes `Server._handle_request`, which reads
    the dict: a handler not yet wrapped is wrapped (and stored) right there, before it runs.
    """
    original = lowlevel._handle_request
    if getattr(original, "__idemtools_dispatch__", False):
        return
    mark = "__idemtools_wrapped__"

    async def _handle_request(message: Any, req: Any, *args: Any, **kwargs: Any) -> Any:
        wrap = wraps.get(type(req))
        if wrap is not None:
            handlers = lowlevel.request_handlers
            handler = handlers.get(type(req))
            if handler is not None and not getattr(handler, mark, False):
                handlers[type(req)] = wrap(handler)
        return await original(message, req, *args, **kwargs)

    _handle_request.__idemtools_dispatch__ = True  # type: ignore[attr-defined]
    lowlevel._handle_request = _handle_request  # type: ignore[method-assign]
