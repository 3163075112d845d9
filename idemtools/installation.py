"""`install(server)`: one call that makes an MCP server idempotent, whatever its SDK line.

The SDK line is chosen by feature detection, and each adapter module is imported only when its
server type is recognised, so this module imports no SDK code itself. What `install` returns is
an `Installation`: the engine (store, policies, stats) and what the docs generator needs to
describe the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .engine import Engine
from .errors import ErrorCodes, InstallError
from .policy import DEFAULT_POLICY, Policy, Registry, _checked_authorize
from .scopes import AuthorizeFn
from .stores.base import Store

__all__ = ["Installation", "ToolPolicy", "install", "installation_of"]

_ATTR = "__idemtools_installation__"


@dataclass(frozen=True)
class ToolPolicy:
    """A tool as the server lists it, with the policy its keyed calls get."""

    name: str
    policy: Policy
    own: bool
    """True when the tool declared its own policy (`@idempotent`), False for the default."""


@dataclass
class Installation:
    """What `install()` set up; keep it to read stats, reach the store or close it."""

    server: Any
    engine: Engine
    adapter: str
    """Which adapter runs: "mcp1.fastmcp", "mcp1.lowlevel", "mcp2.mcpserver", "mcp2.lowlevel"."""
    _list_tools: Callable[[], Awaitable[list[tuple[str, Policy | None]]]] = field(repr=False)

    @property
    def store(self) -> Store:
        return self.engine.store

    async def tools(self) -> list[ToolPolicy]:
        """Every tool the server lists (plus registry-only names), sorted by name."""
        found: dict[str, ToolPolicy] = {}
        for name, own in await self._list_tools():
            policy = own or self.engine.registry.get(name)
            found[name] = ToolPolicy(
                name, policy or self.engine.default_policy, own=policy is not None
            )
        return [found[name] for name in sorted(found)]

    async def aclose(self) -> None:
        await self.engine.store.aclose()


def installation_of(server: Any) -> Installation | None:
    """The `Installation` on a server, or None when idemtools is not installed on it."""
    found = getattr(server, _ATTR, None)
    return found if isinstance(found, Installation) else None


def install(
    server: Any,
    *,
    store: Store | None = None,
    default_policy: Policy = DEFAULT_POLICY,
    registry: Registry | None = None,
    max_key_length: int = 255,
    max_outcome_bytes: int = 1 << 20,
    codes: ErrorCodes | None = None,
    mark_replays: bool = False,
    declare_field: bool = True,
    authorize: AuthorizeFn | None = None,
) -> Installation:
    """Make every keyed `tools/call` on `server` idempotent, per SEP-3182.

    Accepts FastMCP and the low-level `Server` on mcp 1.x, MCPServer and the low-level `Server`
    on mcp 2.x. After it returns, keyed calls are deduplicated before tool lookup, argument
    validation or the handler, on every transport, and `capabilities.tools.idempotency` is
    advertised. Tools without `@idempotent` get `default_policy`: a server that advertises the
    capability never executes a keyed call twice.

    Args:
        store: defaults to a new `MemoryStore` (one process; use Redis or PostgreSQL when the
            server runs as several instances).
        declare_field: also declare `idempotencyKey` on the SDK's `CallToolRequestParams`
            (typed attribute `idempotency_key`), and check at start-up that a keyed request
            survives the SDK's parse path.
        authorize: the server-wide `check(context)` for tools whose `@idempotent` declares no
            `authorize=` of its own (a tool's own check replaces it). It runs before every
            replay and execution of a keyed call; if it raises, the call is refused with
            `idempotency_unauthorized`. Needed whenever tools authorize inside their handlers:
            a replay never reaches the handler.

    Raises:
        InstallError: the server type is not supported, idemtools is already installed on it,
            or the SDK would drop the key; never returns a silently unprotected server.
    """
    if installation_of(server) is not None:
        raise InstallError("idemtools is already installed on this server")
    if store is None:
        from .stores.memory import MemoryStore

        store = MemoryStore()
    engine = Engine(
        store,
        registry=registry,
        default_policy=default_policy,
        max_key_length=max_key_length,
        max_outcome_bytes=max_outcome_bytes,
        codes=codes,
        mark_replays=mark_replays,
        authorize=_checked_authorize(authorize),
    )
    from .adapters import adapt

    installation = adapt(server, engine, declare_field=declare_field)
    setattr(server, _ATTR, installation)
    return installation
