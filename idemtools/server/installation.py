"""`install(server)`: one call that makes an MCP server idempotent, whatever its SDK line.

The SDK line is chosen by feature detection, and each adapter module is imported only when its
server type is recognised, so this module imports no SDK code itself. What `install` returns is
an `Installation`: the engine (store, policies, stats) and what the docs generator needs to
describe the server.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from .._sdk import SDK2
from ..engine import Engine
from ..engine.store_calls import store_name
from ..engine.telemetry import OnOutcome
from ..errors import ErrorCodes, InstallError
from ..policy import DEFAULT_POLICY, Policy, Registry, _checked_authorize
from ..scopes import AuthorizeFn, declared_local_transport
from ..stores.base import Store
from .scope_fit import Serving, warn_unusable_scopes

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

__all__ = ["Installation", "ToolPolicy", "install", "installation_of"]

_ATTR = "__idemtools_installation__"

log = logging.getLogger("idemtools")

STARTUP_CHECK_TIMEOUT = 5.0
"""Seconds the start-up check waits for the store before it reports it unreachable."""

_CHECK_SCOPE = "idemtools:startup-check"


@dataclass(frozen=True)
class ToolPolicy:
    """A tool as the server lists it, with the policy its keyed calls get."""

    name: str
    policy: Policy
    own: bool
    """True when the tool has a policy of its own (its `@idempotent`, a declared name, or on a
    low-level server the registry's entry for its name), False for the default."""
    input_schema: dict[str, Any] | None = None
    """The tool's JSON Schema for `arguments`, as the server lists it (None if unknown)."""


@dataclass
class Installation:
    """What `install()` set up; keep it to read stats, reach the store or close it."""

    server: Any
    engine: Engine
    adapter: str
    """Which adapter runs: "mcp1.fastmcp", "mcp1.lowlevel", "mcp2.mcpserver", "mcp2.lowlevel",
    or "fastmcp" (the standalone FastMCP 4.x framework)."""
    _list_tools: Callable[[], Awaitable[list[tuple[str, Policy | None, dict[str, Any] | None]]]] = (
        field(repr=False)
    )
    _by_name: bool = field(default=False, repr=False)
    """A low-level server: tools' policies are found by name (see `Adapted.by_name`)."""

    @property
    def store(self) -> Store:
        return self.engine.store

    async def tools(self) -> list[ToolPolicy]:
        """Every tool the server lists, sorted by name, with the policy its keyed calls get.

        Found as dispatch finds it (`Engine.declared_policy`): on the tool's function, or by
        name in the registry on a low-level server, so the docs never promise another policy.
        """
        found: dict[str, ToolPolicy] = {}
        for name, own, schema in await self._list_tools():
            policy = self.engine.declared_policy(name, own, by_name=self._by_name)
            found[name] = ToolPolicy(
                name, policy or self.engine.default_policy, policy is not None, schema
            )
        return [found[name] for name in sorted(found)]

    _checked: bool = field(default=False, repr=False)
    shutdown_grace: float | None = None
    """Seconds the end of a transport or a shutdown signal waits for keyed calls in flight
    (`install(shutdown_grace=)`); None: the longest lease among them (see Operations)."""
    _closed: anyio.Event | None = field(default=None, repr=False)

    async def check_store(self, *, wait: float = STARTUP_CHECK_TIMEOUT) -> bool:
        """Read one (absent) record from the store: True when it answers.

        The server runs this once when it starts (its lifespan); call it yourself for a
        readiness probe. An unreachable store is logged at ERROR, naming the store and the
        cause, and counted in `stats.store_errors`; nothing is refused: unkeyed calls never
        need the store, and keyed calls get `idempotency_store_unavailable` until it answers.
        """
        store = self.engine.store
        name = store_name(store)
        problem: str | None = None
        try:
            with anyio.fail_after(wait):
                await self.engine.telemetry.timed("get", store.get(_CHECK_SCOPE, "startup-check"))
        except TimeoutError:
            problem = f"no answer within {wait:g} s"
        except Exception as exc:
            cause = exc.__cause__
            problem = f"{exc}" + (f" (cause: {cause!r})" if cause is not None else "")
        if problem is None:
            log.info("idempotency store %s answered the start-up check", name)
            return True
        self.engine.stats.store_errors += 1
        log.error(
            "idempotency store %s is unreachable at start-up: %s. The server keeps serving: "
            "unkeyed calls work, keyed calls are refused with idempotency_store_unavailable "
            "until the store answers",
            name,
            problem,
        )
        return False

    _servings: dict[Serving, bool] = field(default_factory=dict, repr=False)
    """What the server was seen to serve (adapters note it), and whether it was checked."""

    _default_store: bool = field(default=False, repr=False)
    """No store was named: the default is still open, fixed by the first transport served."""

    def note_serving(self, serving: Serving) -> None:
        """An adapter learned what the server serves; its scopes are checked at start-up.

        The first transport served also fixes the default store (before the first call): on
        stdio a SQLite file in the user's state directory, elsewhere `MemoryStore`. A low-level
        `Server` serves stdio as far as idemtools can tell only when its `run()` is called
        inside `local_transport("stdio")` (noted at its lifespan, `_check_once`)."""
        self._servings.setdefault(serving, False)
        if self._default_store:
            self._default_store = False
            if serving.transport == "stdio":
                from ..stores.default import stdio_default_store

                self.engine.use_store(stdio_default_store(_server_name(self.server)))

    async def check_scopes(self, serving: Serving) -> list[str]:
        """Log one WARNING per tool whose scope cannot work on `serving`; return them.

        idemtools calls this itself when the server starts on a transport it can identify
        (stdio, the HTTP/SSE app of FastMCP or MCPServer); call it from a custom main that
        serves a low-level `Server` over HTTP.
        """
        self._servings[serving] = True
        tools = await self.tools()
        return warn_unusable_scopes(((t.name, t.policy.scope) for t in tools), serving)

    async def _check_servings(self) -> None:
        for serving in [s for s, checked in self._servings.items() if not checked]:
            try:
                await self.check_scopes(serving)
            except Exception:  # a listing that fails must not stop the server starting
                log.warning("idemtools could not check the tools' scopes", exc_info=True)

    async def _check_once(self) -> None:
        if declared_local_transport() == "stdio":
            # A low-level `Server.run()` inside `local_transport("stdio")`: its transport is
            # its caller's code, which declared it. The lifespan is entered in `run()`, in the
            # caller's context and before the first message is read. (The runners of FastMCP
            # and MCPServer noted their stdio already: the same `Serving`, noted once.)
            self.note_serving(Serving("stdio", modern_era=SDK2))
        self._default_store = False  # served: the store is fixed before the first call
        await self._check_servings()
        if not self._checked:
            self._checked = True
            await self.check_store()

    def hook_lifespan(self, lowlevel: Any) -> None:
        """Run `check_store()` the first time the server's lifespan is entered."""
        original = lowlevel.lifespan

        @contextlib.asynccontextmanager
        async def lifespan(server: Any) -> AsyncIterator[Any]:
            async with original(server) as state:
                await self._check_once()
                yield state

        lowlevel.lifespan = lifespan

    def hook_transports(self, *owners: Any) -> None:
        """Make the end of every runner and ASGI app lifespan of `owners` wait for the keyed
        calls in flight (see `idemtools.server.shutdown`)."""
        from .shutdown import hook_transports

        hook_transports(self, *owners)

    def serving(self) -> contextlib.AbstractAsyncContextManager[None]:
        """`async with installation.serving(): ...` around a custom main's serving loop: when
        it ends (returns, fails, is cancelled) the keyed calls in flight are recorded first,
        and SIGTERM/SIGINT meanwhile shut down gracefully (see Operations, "Shutdown")."""
        from .shutdown import serving

        return serving(self)

    async def aclose(self, grace: float | None = None) -> None:
        """Shut down: refuse new keyed calls, let the running ones finish and be recorded
        (waiting at most `grace` seconds, by default their longest lease, their leases
        renewed all the while). Calls still running when the grace ends are logged at ERROR;
        the lease keeper and the store then stay open until the last of them has ended (or
        the process exits), so their outcomes are still recorded.

        Once only: a second call (the transport ended after a signal started the shutdown)
        waits for the first."""
        if self._closed is not None:
            await self._closed.wait()
            return
        self._closed = anyio.Event()
        try:
            await self.engine.aclose(grace)
        finally:
            self._closed.set()


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
    advertise_tool_metadata: bool = False,
    on_outcome: OnOutcome | None = None,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
    replay_authorization: Literal["skip_middleware"] | None = None,
    shutdown_grace: float | None = None,
) -> Installation:
    """Make every keyed `tools/call` on `server` idempotent, per SEP-3182.

    Accepts FastMCP and the low-level `Server` on mcp 1.x, MCPServer and the low-level `Server`
    on mcp 2.x, and the standalone FastMCP 4.x framework (`fastmcp`, on mcp 2.x). After it
    returns, keyed calls are deduplicated before tool lookup, argument validation or the
    handler, on every transport, and `capabilities.tools.idempotency` is advertised. Tools
    without `@idempotent` get `default_policy`: a server that advertises the capability never
    executes a keyed call twice.

    Args:
        store: by default the store `IDEMTOOLS_STORE` names (a URL, see `stores.from_url`);
            without it, chosen when the server starts serving: on stdio a SQLite file per
            server in the user's state directory (a host may start a new server process for
            a retry; see `idemtools.stores.default`), elsewhere a new `MemoryStore` (one
            process; use Redis or PostgreSQL when the server runs as several instances).
        declare_field: also declare `idempotencyKey` on the SDK's `CallToolRequestParams`
            (typed attribute `idempotency_key`), and check at start-up that a keyed request
            survives the SDK's parse path.
        authorize: the server-wide `check(context)` for tools whose `@idempotent` declares no
            `authorize=` of its own (a tool's own check replaces it). It runs before every
            replay and execution of a keyed call; if it raises, the call is refused with
            `idempotency_unauthorized`. Needed whenever tools authorize inside their handlers:
            a replay never reaches the handler.
        advertise_tool_metadata: also publish each tool's policy in `tools/list`, as
            `_meta["io.github.idemtools/idempotency"] = {"retentionSeconds": int, "scope":
            kind}`, so a client can tell at run time how long a retry stays safe (the SEP
            names per-tool metadata as future work). Off by default: it reveals retention and
            scope kinds to every client that lists tools. `idemtools.client.tool_idempotency`
            reads it.
        on_outcome: `hook(tool, kind, context)`, sync or async, called once per keyed call
            with what it came to: "executed", "replayed", "conflict", "in_progress" or
            "refused" (`idemtools.engine.telemetry.OutcomeContext` has the key's digest, the policy,
            the answer). For your own metrics and business events, e.g. telling a replay from
            a fresh result. Awaited before the answer is sent; what it raises is logged and
            changes nothing.
        tracer_provider: the OpenTelemetry tracer provider for idemtools' spans; by default
            the global one, once the application installs an SDK (see Operations,
            "Observability").
        meter_provider: the meter provider for its metrics; by default the global one.
        replay_authorization: `"skip_middleware"` means exactly "I accept that replays do
            not pass my middleware" (FastMCP: its middleware chain, `AuthMiddleware` and a
            tool's `auth=`); logged at WARNING. By default every FastMCP middleware runs
            before a keyed call is decided, replays included, and `install()` refuses a
            server where it cannot arrange that. Other server types need no opt-out: their
            middlewares already run before replays (mcp 2.x) or they have none (mcp 1.x).
        shutdown_grace: how long (seconds) the end of the transport — stdio EOF, `run()`
            returning, the ASGI lifespan exiting, SIGTERM or SIGINT — waits for the keyed
            calls in flight to finish and be recorded before the process may exit; None (the
            default): the longest lease among them. See Operations, "Shutdown".

    Raises:
        InstallError: the server type is not supported, idemtools is already installed on it,
            the SDK would drop the key, or an SDK internal idemtools relies on is missing or
            changed in the installed release (the error names it; nothing was hooked); never
            returns a silently unprotected server.
    """
    if replay_authorization not in (None, "skip_middleware"):
        raise ValueError(
            f"replay_authorization takes None or 'skip_middleware', got {replay_authorization!r}"
        )
    if installation_of(server) is not None:
        raise InstallError("idemtools is already installed on this server")
    grace = _checked_grace(shutdown_grace)
    if default_policy.key_argument is not None or default_policy.key_from:
        raise InstallError(
            "default_policy has a key bridge (key_argument= / key_from=): bridges are declared "
            "per tool, with @idempotent on each tool that should take one"
        )
    default_store = False
    if store is None:
        from ..stores.default import from_env

        store = from_env()
    if store is None:
        from ..stores.memory import MemoryStore

        store, default_store = MemoryStore(), True  # stdio swaps it when it starts serving
    engine = Engine(
        store,
        registry=registry,
        default_policy=default_policy,
        max_key_length=max_key_length,
        max_outcome_bytes=max_outcome_bytes,
        codes=codes,
        mark_replays=mark_replays,
        authorize=_checked_authorize(authorize),
        on_outcome=_checked_hook(on_outcome),
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
    )
    from .adapters import adapt

    # The skeleton every adapter shares: the adapter hooks the SDK and says where the shared
    # steps attach; the Installation is built, and those steps run, here.
    adapted = adapt(
        server,
        engine,
        declare_field=declare_field,
        tool_metadata=advertise_tool_metadata,
        replay_authorization=replay_authorization,
    )
    installation = Installation(
        server=server,
        engine=engine,
        adapter=adapted.kind,
        _list_tools=adapted.list_tools,
        _by_name=adapted.by_name,
    )
    installation.hook_lifespan(adapted.lifespan_owner)  # the store is checked at start-up
    installation.hook_transports(*adapted.transport_owners)  # their end waits for calls in flight
    for watch in adapted.watchers:
        watch(installation)
    installation.shutdown_grace = grace
    installation._default_store = default_store
    setattr(server, _ATTR, installation)
    return installation


def _server_name(server: Any) -> str:
    name = getattr(server, "name", None)
    return name if isinstance(name, str) and name else type(server).__name__


def _checked_grace(grace: object) -> float | None:
    if grace is None:
        return None
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace < math.inf:
        raise ValueError(f"shutdown_grace must be a finite number of seconds >= 0, got {grace!r}")
    return float(grace)


def _checked_hook(hook: OnOutcome | None) -> OnOutcome | None:
    if hook is not None and not callable(hook):
        raise TypeError(f"on_outcome must be a callable (tool, kind, context), got {hook!r}")
    return hook
