"""SDK adapters: the only modules that import `mcp`. One per SDK line, chosen by feature detection.

mcp 1.x dispatches through `Server.request_handlers` (a dict keyed by request type); mcp 2.x
through a middleware chain (`Server.middleware`) that sees raw params before any validation. The
installed line is detected by what it ships (`mcp_types` exists only on 2.x), not by parsing
version strings, and the server object is checked for the hook that line's adapter needs. A
standalone FastMCP 4.x server (`fastmcp`, built on mcp 2.x) gets the mcp2 middleware with the
fastmcp module's tool lookup; this router composes them, so no adapter imports another.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from ..errors import InstallError

if TYPE_CHECKING:
    from ..engine import Engine
    from ..installation import Installation

__all__ = ["SDK2", "adapt", "sdk_line"]


def sdk_line() -> int:
    """The installed mcp SDK's major line (1 or 2): only the 2.x line ships `mcp_types`."""
    return 2 if importlib.util.find_spec("mcp_types") is not None else 1


SDK2 = sdk_line() == 2
"""mypy checks one SDK line per run: `--always-true SDK2` on 2.x, `--always-false SDK2` on 1.x."""


def _is_fastmcp(server: Any) -> bool:
    """A standalone FastMCP (`fastmcp` 4.x) server; its module is loaded if `server` is one."""
    module = sys.modules.get("fastmcp.server.server")
    cls = getattr(module, "FastMCP", None)
    return isinstance(cls, type) and isinstance(server, cls)


def adapt(
    server: Any,
    engine: Engine,
    *,
    declare_field: bool,
    tool_metadata: bool = False,
    replay_authorization: str | None = None,
) -> Installation:
    lowlevel = getattr(server, "_lowlevel_server", None) or getattr(server, "_mcp_server", None)
    target = lowlevel if lowlevel is not None else server
    if SDK2 and _is_fastmcp(server):
        # The mcp2 middleware with FastMCP's tool lookup: composed here, so that neither
        # adapter imports the other.
        from . import fastmcp, mcp2

        tools = fastmcp.FastMCPTools(
            server, skip_middleware=replay_authorization == "skip_middleware"
        )
        installation = mcp2.adapt(
            server,
            target,
            engine,
            declare_field=declare_field,
            tool_metadata=tool_metadata,
            lookup=tools,
            issuer=fastmcp.issuer(server),
            kind="fastmcp",
            list_tools=tools.listing,
        )
        fastmcp.finish(target)
        fastmcp.watch(server, installation)
        return installation
    if SDK2:
        if isinstance(getattr(target, "middleware", None), list):
            from .mcp2 import adapt as adapt2

            installation = adapt2(
                server, target, engine, declare_field=declare_field, tool_metadata=tool_metadata
            )
            _watch_sdk_server(server, target, installation, modern_era=True)
            return installation
    elif isinstance(getattr(target, "request_handlers", None), dict):
        from .mcp1 import adapt as adapt1

        installation = adapt1(
            server, target, engine, declare_field=declare_field, tool_metadata=tool_metadata
        )
        _watch_sdk_server(server, target, installation, modern_era=False)
        return installation
    raise InstallError(
        f"idemtools cannot install on {type(server).__name__}: expected FastMCP or the low-level "
        "Server (mcp 1.x), or MCPServer, the low-level Server or a standalone FastMCP 4.x server "
        f"(mcp 2.x), from the installed mcp {sdk_line()}.x"
    )


def _watch_sdk_server(
    server: Any, lowlevel: Any, installation: Installation, *, modern_era: bool
) -> None:
    """FastMCP (mcp 1.x) and MCPServer (mcp 2.x): note the transport their runners serve, so
    that scopes that cannot work there are warned about at start-up (`scope_fit`)."""
    if server is lowlevel:  # a low-level Server: its transport is the caller's own code
        return
    from ._serving import watch_entry_points

    settings = getattr(server, "settings", None)
    watch_entry_points(
        server,
        installation,
        authenticated=lambda: getattr(server, "_token_verifier", None) is not None,
        stateless_default=lambda: bool(getattr(settings, "stateless_http", False)),
        modern_era=modern_era,
    )
