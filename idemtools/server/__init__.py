"""The server side: `install()` and what it builds around an MCP server.

`installation` (install, the `Installation` it returns, per-tool policies), `shutdown` (the end
of a transport), `scope_fit` (scopes that cannot work on the transport served) and `adapters`
(the SDK edges: the only modules that import `mcp` on the server side). Users import these
names from `idemtools`; this face is for readers and the architecture page.
"""

from __future__ import annotations

from .installation import Installation, ToolPolicy, install, installation_of

__all__ = ["Installation", "ToolPolicy", "install", "installation_of"]
