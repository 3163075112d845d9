"""SDK adapters: the only modules that import `mcp`. One per SDK line, chosen by feature detection.

mcp 1.x dispatches through `Server.request_handlers` (a dict keyed by request type); mcp 2.x
through a middleware chain (`Server.middleware`) that sees raw params before any validation. The
installed line is detected by what it ships (`mcp_types` exists only on 2.x), not by parsing
version strings, and the server object is checked for the hook that line's adapter needs. A
standalone FastMCP 4.x server (`fastmcp`, built on mcp 2.x) gets the mcp2 middleware with the
fastmcp module's tool lookup; this router composes them, so no adapter imports another.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..._sdk import SDK2, sdk_line
from ...errors import InstallError

if TYPE_CHECKING:
    from ...engine import Engine
    from ._adapted import Adapted, SDKLine, ServingSink

__all__ = ["SDK2", "adapt", "lowlevel_of", "sdk_line"]


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
) -> Adapted:
    """Hook `server` with the adapter of its type; `installation.install` builds the rest.

    The per-SDK protocol every adapter follows: its `sdk_*` module finds the low-level server
    (`lowlevel_of`) and probes the internals it reads (`probe`: `InstallError` naming a
    changed one, before anything is hooked); the adapter hooks the server and returns an
    `Adapted` value.
    """
    if SDK2 and _is_fastmcp(server):
        # The mcp2 middleware with FastMCP's tool lookup: composed here, so that neither
        # adapter imports the other.
        from . import fastmcp, mcp2, sdk_fastmcp

        sdk_fastmcp.probe(server)
        target = sdk_fastmcp.lowlevel_of(server)
        tools = fastmcp.FastMCPTools(
            server, skip_middleware=replay_authorization == "skip_middleware"
        )
        adapted = mcp2.adapt(
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
        fastmcp.finish(target, tools)
        return replace(adapted, watchers=(lambda sink: fastmcp.watch(server, sink),))
    if SDK2:
        from . import sdk_mcp2

        lowlevel = sdk_mcp2.lowlevel_of(server)
        if lowlevel is not None:
            from .mcp2 import adapt as adapt2

            adapted = adapt2(
                server, lowlevel, engine, declare_field=declare_field, tool_metadata=tool_metadata
            )
            return _with_watch(adapted, server, lowlevel, sdk_mcp2, modern_era=True)
    else:
        from . import sdk_mcp1

        lowlevel1 = sdk_mcp1.lowlevel_of(server)
        if lowlevel1 is not None:
            from .mcp1 import adapt as adapt1

            adapted = adapt1(
                server, lowlevel1, engine, declare_field=declare_field, tool_metadata=tool_metadata
            )
            return _with_watch(adapted, server, lowlevel1, sdk_mcp1, modern_era=False)
    raise InstallError(
        f"idemtools cannot install on {type(server).__name__}: expected FastMCP or the low-level "
        "Server (mcp 1.x), or MCPServer, the low-level Server or a standalone FastMCP 4.x server "
        f"(mcp 2.x), from the installed mcp {sdk_line()}.x"
    )


def _with_watch(
    adapted: Adapted, server: Any, lowlevel: Any, sdk: SDKLine, *, modern_era: bool
) -> Adapted:
    """FastMCP (mcp 1.x) and MCPServer (mcp 2.x): note the transport their runners serve, so
    that scopes that cannot work there are warned about at start-up (`scope_fit`)."""
    if server is lowlevel:  # a low-level Server: its transport is the caller's own code
        return adapted
    from ._serving import watch_entry_points

    def watch(sink: ServingSink) -> None:
        watch_entry_points(
            server,
            sink,
            authenticated=lambda: bool(sdk.token_verifier_set(server)),
            stateless_default=lambda: bool(sdk.stateless_http(server)),
            modern_era=modern_era,
        )

    return replace(adapted, watchers=(watch,))


def lowlevel_of(server: Any) -> Any:
    """The low-level server that dispatches for `server` (itself if it is one), else None."""
    if SDK2:
        if _is_fastmcp(server):
            from . import sdk_fastmcp

            return sdk_fastmcp.lowlevel_of(server)
        from . import sdk_mcp2

        return sdk_mcp2.lowlevel_of(server)
    else:
        from . import sdk_mcp1

        return sdk_mcp1.lowlevel_of(server)
