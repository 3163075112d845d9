"""What an adapter hands back to `install()`: a value, not an `Installation`.

Why a value: `installation.py` builds the `Installation` and runs the steps every adapter shares
(the start-up store check in the server's lifespan, the graceful end of its transports), so the
adapters never import `installation` and the import graph has no circle. SDK-free.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...policy import Policy
from ..scope_fit import Serving

__all__ = ["Adapted", "ListTools", "SDKLine", "ServingSink"]

ListTools = Callable[[], Awaitable[list[tuple[str, Policy | None, dict[str, Any] | None]]]]
"""Every tool the server lists: (name, its own policy or None, its input schema or None)."""


class SDKLine(Protocol):
    """The small per-SDK protocol of the install skeleton: what `adapters.adapt` asks of an
    SDK line's accessor module (`sdk_mcp1`, `sdk_mcp2`) besides its adapter."""

    SDK: str
    """The release, as error messages name it ("mcp 1.30.0")."""

    def lowlevel_of(self, server: Any) -> Any:
        """The low-level server that dispatches for `server`, or None: not this line's."""

    def probe(self, server: Any, lowlevel: Any) -> None:
        """`InstallError` naming the first internal this release lacks or changed."""

    def token_verifier_set(self, server: Any) -> bool: ...

    def stateless_http(self, server: Any) -> bool: ...


class ServingSink(Protocol):
    """Where an adapter notes what the server serves (an `Installation`)."""

    def note_serving(self, serving: Serving) -> None: ...

    async def _check_servings(self) -> None: ...


@dataclass(frozen=True)
class Adapted:
    """An adapter's result: which adapter runs, how to list the tools, and where the shared
    install steps attach."""

    kind: str
    """"mcp1.fastmcp", "mcp1.lowlevel", "mcp2.mcpserver", "mcp2.lowlevel" or "fastmcp"."""
    list_tools: ListTools
    lifespan_owner: Any
    """The low-level server whose `lifespan` runs the start-up store check."""
    transport_owners: tuple[Any, ...]
    """Objects whose runners and ASGI app factories end gracefully (`idemtools.server.shutdown`)."""
    watchers: tuple[Callable[[ServingSink], None], ...] = field(default=())
    """Run once the installation exists: note the transports the server's runners serve."""
    by_name: bool = False
    """True for a low-level server: it has no tool functions, so a tool's policy is found by
    name in the registry. False: on the tool's function, else a name declared as such
    (`Registry.declared`), else the default (`Engine.declared_policy`)."""
