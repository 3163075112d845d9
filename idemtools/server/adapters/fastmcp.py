"""Adapter for the standalone FastMCP framework (`fastmcp` 4.x on PyPI, built on mcp 2.x).

A FastMCP 4 server is an mcp 2.x low-level `Server` underneath (`server._mcp_server`), so the
deduplication itself is the mcp2 adapter's middleware, at the same place: in the SDK middleware
chain, where the raw params (and the key) are still there. This module imports no other
adapter: it gives the mcp2 middleware a tool lookup (`FastMCPTools`) and the issuer, and the
router (`adapters.adapt`) puts the two together. What FastMCP changes, and this module
handles:

- FastMCP's root middleware rebuilds `initialize` and `server/discover` results as typed
  models, which drop `capabilities.tools.idempotency`. An outermost SDK middleware adds it
  back to the result FastMCP returns.
- Tools are found the way FastMCP finds them (`FastMCP.get_tool`: providers, mounted servers,
  `name=` overrides, `tool_names=` renames, component `auth=` and visibility). A tool the
  caller cannot see is not deduplicated at all: FastMCP answers it as it always does, and
  nothing is claimed, recorded or replayed (a caller whose access was revoked gets no replay).
  The policy is the `@idempotent` on the function behind the tool, through transformed and
  mounted-server tools.
- FastMCP's own middleware chain (`AuthMiddleware`, custom middleware, a mounted server's
  chain) and a tool's `auth=` run inside the SDK middleware. So the keyed call is *decided*
  further in: the SDK middleware builds the call, FastMCP's chain runs, and at its end (in
  front of the extension interceptors and `call_tool(run_middleware=False)` of the server
  that holds the tool: before tool lookup, argument validation and the run) the engine
  claims, replays or refuses. A replay thus passes every FastMCP middleware exactly as an
  execution does (see `_decide` and `_guard`).
- `ResponseCachingMiddleware` runs in FastMCP's own chain: a keyed call bypasses it both ways
  (never answered from the cache, never written to it), so every keyed call either executes
  once or is replayed from the idempotency record. Unkeyed calls are cached as before.
- FastMCP's in-memory `Client(server)` transport is identified as local ("memory"), like the
  SDK's own, so `by_auth_subject` works in FastMCP-style tests; `server.run()` (stdio) is
  identified by the mcp2 adapter. Over HTTP the caller is the access token FastMCP's `auth=`
  (token verifiers, auth providers) validated; its issuer is the token's `iss`, else the
  verifier's configured `issuer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from ... import bridges
from ..._sdk import fields as _fields
from ...errors import InstallError
from ...outcome import Outcome
from ...policy import Policy, policy_of
from ...scopes import declared_local_transport, local_transport
from . import patches
from . import sdk_fastmcp as sdk
from ._validated import Values

if TYPE_CHECKING:
    from ...engine import Engine, ToolCall

__all__ = ["FastMCPTools", "finish", "issuer", "tool_policy", "watch"]

log = logging.getLogger("idemtools")

_KEYED_CALL: ContextVar[bool] = ContextVar("idemtools_fastmcp_keyed_call", default=False)
"""True while a keyed `tools/call` runs: FastMCP's response cache steps aside for it."""

_MAX_HOPS = 16
"""Tool wrappers followed at most to find the function behind a tool (mount depth, renames)."""


async def tool_policy(tool: Any) -> Policy | None:
    """The `@idempotent` policy of the function behind a FastMCP tool, if it declared one.

    Follows what FastMCP wraps a tool in: a `TransformedTool` (a rename, `tool_names=`,
    argument transforms) forwards to its `parent_tool`; a mounted server's tool
    (`FastMCPProviderTool`) delegates to the child server's tool of its original name.
    """
    for _ in range(_MAX_HOPS):
        if tool is None:
            return None
        policy = policy_of(getattr(tool, "fn", None))
        if policy is not None:
            return policy
        parent = getattr(tool, "parent_tool", None)
        if parent is not None:
            tool = parent
            continue
        child, original = sdk.mounted(tool)
        if child is not None and original is not None and hasattr(child, "get_tool"):
            tool = await child.get_tool(original)
            continue
        return None
    return None


def _issuer(server: Any) -> str | None:
    """The issuer FastMCP's `auth=` verifies tokens against (`JWTVerifier(issuer=...)`, also
    inside a `RemoteAuthProvider`), when it names exactly one."""
    auth = getattr(server, "auth", None)
    for candidate in (auth, getattr(auth, "token_verifier", None)):
        issuer = getattr(candidate, "issuer", None)
        if isinstance(issuer, str) and issuer:
            return issuer
    return None


class FastMCPTools:
    """The mcp2 middleware's tool lookup (`mcp2.ToolLookup`), the way FastMCP finds tools."""

    passes_unknown = True
    """A tool the caller cannot see goes to FastMCP untouched: nothing claimed or replayed."""

    def __init__(self, fastmcp: Any, *, skip_middleware: bool = False) -> None:
        self.fastmcp = fastmcp
        self.skip_middleware = skip_middleware
        if skip_middleware:
            log.warning(
                "idemtools on FastMCP %r with replay_authorization='skip_middleware': replays "
                "are answered before FastMCP's middleware (AuthMiddleware, custom middleware) "
                "runs; only a tool's auth= and idemtools' own authorize= checks apply to them",
                getattr(fastmcp, "name", "?"),
            )
        elif not _has_innermost_point(fastmcp):
            raise InstallError(
                "idemtools cannot run this FastMCP server's middleware before replays: its "
                "call_tool() has no run_middleware= step to decide keyed calls at. Upgrade "
                "fastmcp, or pass install(..., replay_authorization='skip_middleware') to accept "
                "that replays do not pass your middleware"
            )

    async def decide(
        self, engine: Engine, call: ToolCall, run: Callable[[], Awaitable[Outcome]]
    ) -> Outcome:
        """Decide a keyed call at the innermost point of FastMCP's chain (`_decide`)."""
        if self.skip_middleware:
            return await engine.handle(call, run)
        return await _decide(self.fastmcp, engine, call, run)

    async def find(self, name: str) -> tuple[bool, Policy | None]:
        try:
            tool = await self.fastmcp.get_tool(name)
        except Exception:
            # A lookup that fails says nothing: deduplicate with the default policy.
            log.warning("FastMCP get_tool(%r) failed; the keyed call gets the default policy", name)
            return True, None
        if tool is None:
            return False, None
        return True, await tool_policy(tool)

    async def unknown(self, name: str, known_before: bool) -> bool:
        # Seen before the call (else it bypassed the engine); gone now: removed while it ran.
        try:
            return await self.fastmcp.get_tool(name) is None
        except Exception:
            return False

    async def values_of(self, name: str) -> Values | None:
        """What FastMCP's argument validation gives tool `name`'s function, for a derived key.

        Found the way FastMCP runs the call: a mounted server's tool is validated by that
        server (its own `strict_input_validation`), and a rename (`tool_names=`) by the tool it
        renames, both of which get the arguments as sent. A tool whose arguments are mapped
        first (an argument transform, a transform function) or a tool class of one's own has
        no validation to reuse: None, the arguments as sent. A lookup that fails: the same.
        """
        server = self.fastmcp
        try:
            tool = await server.get_tool(name)
            for _ in range(_MAX_HOPS):
                if tool is None:
                    return None
                renamed = sdk.renamed_from(tool)
                if renamed is not None:
                    tool = renamed
                    continue
                child, original = sdk.mounted(tool)
                if child is not None and original is not None and hasattr(child, "get_tool"):
                    server, tool = child, await child.get_tool(original)
                    continue
                return sdk.function_validator(tool, strict=sdk.strict_input(server))
        except Exception:
            log.warning(
                "FastMCP get_tool(%r) failed; its key is derived from the arguments as sent", name
            )
        return None

    async def listing(self) -> list[tuple[str, Policy | None, dict[str, Any] | None]]:
        """Every tool with its policy and input schema, for `Installation.tools()` (the docs)."""
        with _all_components_visible():
            tools = list(await self.fastmcp.list_tools(run_middleware=False))
        # FastMCP's `parameters` is the tool's input schema: the docs' example arguments.
        return [
            (tool.name, await tool_policy(tool), getattr(tool, "parameters", None))
            for tool in tools
        ]


def _bridged(name: object) -> bool:
    """A call that a key bridge may key (a key argument, a derived key): the cache steps aside
    for it as for a call with `idempotencyKey`."""
    return isinstance(name, str) and name in bridges.BRIDGED


class _Edge:
    """Outermost SDK middleware, around FastMCP's own chain and the idemtools middleware.

    - `capabilities.tools.idempotency` on the result FastMCP built: its root middleware
      re-validates `initialize` and `server/discover` results into typed models that drop the
      key the inner idemtools middleware added, so it is added again here, serialized.
    - Marks a keyed `tools/call` while it runs, so that the response cache steps aside.
    - Before the server's first request, notes in `bridges.BRIDGED` every listed tool with a
      key bridge (`_note_bridged`): a tool listed under a name its decorator did not know
      (`name=`, a mounted server's namespace, `tool_names=`) would otherwise take its bridge
      only once a `tools/list` passed through this process, and a client that calls without
      listing first (a fresh stdio process per call) would run it unprotected.
    """

    def __init__(self, tools: FastMCPTools) -> None:
        self.tools = tools
        self.noted = False
        self._noting: asyncio.Lock | None = None

    async def _note_bridged(self) -> None:
        if self._noting is None:
            self._noting = asyncio.Lock()
        async with self._noting:
            if self.noted:
                return
            try:
                for name, policy, _ in await self.tools.listing():
                    bridges.note(name, policy)
            except Exception:
                log.warning(
                    "idemtools could not list this FastMCP server's tools before its first "
                    "request; a tool whose key bridge is under another name than its function's "
                    "takes it once a tools/list passed",
                    exc_info=True,
                )
            self.noted = True

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if not self.noted:
            await self._note_bridged()
        method = ctx.method
        if method == "tools/call":
            params = ctx.params
            if isinstance(params, Mapping) and (
                params.get(_fields.WIRE_NAME) is not None
                or (bridges.BRIDGED and _bridged(params.get("name")))
            ):
                token = _KEYED_CALL.set(True)
                try:
                    return await call_next(ctx)
                finally:
                    _KEYED_CALL.reset(token)
            return await call_next(ctx)
        result = await call_next(ctx)
        if method in ("initialize", "server/discover") and ctx.request_id is not None:
            if isinstance(result, BaseModel):
                result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            return _fields.advertise(result)
        return result


# -- the decision at the innermost point of FastMCP's chain -------------------------------------


class _Pending:
    """One keyed call between its two halves: built at the SDK edge (`_decide`), met at the
    innermost point of FastMCP's chain (`_guard`), where the engine's verdict is awaited."""

    __slots__ = ("closed", "passes", "placeholder", "reached", "verdict")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.reached: asyncio.Future[None] = loop.create_future()
        self.verdict: asyncio.Future[bool] = loop.create_future()
        """True: run the tool. False: the record answers; the chain unwinds with `placeholder`."""
        self.placeholder: Any = None
        self.passes = 0
        self.closed = False
        """Answered without reaching the tool: a later pass there must not run it."""


_PENDING: ContextVar[_Pending | None] = ContextVar("idemtools_fastmcp_pending", default=None)


def _has_innermost_point(server: Any) -> bool:
    try:
        return "run_middleware" in inspect.signature(server.call_tool).parameters
    except (TypeError, ValueError, AttributeError):
        return False


async def _decide(
    server: Any, engine: Engine, call: ToolCall, run: Callable[[], Awaitable[Outcome]]
) -> Outcome:
    """Run FastMCP's chain first; decide the keyed call where it reaches the tool.

    `run()` (the SDK's handler: FastMCP's chain, then the tool) starts in its own task. If the
    chain answers without reaching the tool (a middleware refused, the tool is hidden), that
    answer stands: nothing was claimed, as for a fresh call. If it reaches the tool, it waits
    there while the engine decides: on "execute" the tool runs and the wire answer is recorded;
    on a replay or refusal the chain unwinds from that point (every middleware sees it return,
    as on an execution) and the record answers, unless a middleware refused on the way out.
    """
    _guard(server)
    loop = asyncio.get_running_loop()
    pending = _Pending(loop)
    token = _PENDING.set(pending)

    async def through_chain() -> Outcome:
        return await run()

    try:
        chain: asyncio.Task[Outcome] = loop.create_task(through_chain())
    finally:
        _PENDING.reset(token)
    try:
        await asyncio.wait((chain, pending.reached), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        chain.cancel()  # nothing was claimed: the caller left before the tool was reached
        raise
    if not pending.reached.done():
        pending.closed = True
        return chain.result()
    executed = False

    async def execute() -> Outcome:
        nonlocal executed
        executed = True
        pending.verdict.set_result(True)
        return await chain

    try:
        outcome = await engine.handle(call, execute)
    except BaseException:
        if not executed:
            chain.cancel()
        raise
    if executed:
        return outcome
    pending.placeholder = _placeholder(outcome)
    pending.verdict.set_result(False)
    try:
        answer = await chain
    except BaseException:
        chain.cancel()
        raise
    if answer.error is not None or (answer.result or {}).get("isError"):
        return answer  # refused on the way out: as it would refuse a fresh result
    return outcome


def _placeholder(outcome: Outcome) -> Any:
    """What the chain's innermost point returns when the record answers: the recorded
    content for a replay (middleware that inspect results see it), else empty. Never an
    error, so that an error out of the chain can only be a middleware's refusal."""
    from fastmcp.tools import ToolResult

    result = outcome.result
    if result is not None:
        try:
            import mcp_types

            parsed = mcp_types.CallToolResult.model_validate(result)
            structured = parsed.structured_content
            return ToolResult(
                content=list(parsed.content),
                structured_content=structured if isinstance(structured, dict) else None,
            )
        except Exception:
            pass
    return ToolResult(content=[])


def _child_server(tool: Any) -> Any:
    """The mounted FastMCP server a tool delegates to (through renames), else None: its own
    chain runs next, and the call is decided at its innermost point instead."""
    from fastmcp import FastMCP

    for _ in range(_MAX_HOPS):
        if tool is None:
            return None
        child, _ = sdk.mounted(tool)
        if isinstance(child, FastMCP):
            return child
        tool = getattr(tool, "parent_tool", None)
    return None


def _guard(server: Any) -> None:
    """Make the end of `server`'s FastMCP chain the point where keyed calls are decided.

    Why there: whatever middleware was added before or after `install()`, and however the list
    was changed, the chain ends in the same place: the extension interceptors (composed by
    `_compose_tool_call_interceptors`, where FastMCP has them), then `call_tool(
    run_middleware=False)` (tool lookup, argument validation, the tool run). The decision sits
    in front of the interceptors, so an interceptor that answers for the tool (a task queue's
    task-creation result) is part of the execution and recorded. A mounted server is guarded
    when a call first reaches it, so servers mounted after `install()` are covered too.
    """
    compose = sdk.compose_interceptors(server)
    if compose is not None:
        if getattr(compose, "__idemtools_guard__", False):
            return

        @functools.wraps(compose)
        def compose_guarded(call_next: Any) -> Any:
            inner = compose(call_next)

            async def gate(context: Any) -> Any:
                if _PENDING.get() is None:
                    return await inner(context)
                name = getattr(context.message, "name", None)
                return await _innermost(server, name, None, lambda: inner(context))

            return gate

        setattr(compose_guarded, "__idemtools_guard__", True)  # noqa: B010
        server._compose_tool_call_interceptors = compose_guarded
        return
    original = server.call_tool  # no interceptors: the chain ends in this call
    if getattr(original, "__idemtools_guard__", False):
        return

    @functools.wraps(original)
    async def call_tool(name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        if _PENDING.get() is None or kwargs.get("run_middleware", True):
            return await original(name, arguments, **kwargs)
        return await _innermost(
            server, name, kwargs.get("version"), lambda: original(name, arguments, **kwargs)
        )

    setattr(call_tool, "__idemtools_guard__", True)  # noqa: B010
    server.call_tool = call_tool


async def _innermost(
    server: Any, name: Any, version: Any, proceed: Callable[[], Awaitable[Any]]
) -> Any:
    """A keyed call at the end of `server`'s chain: wait for the engine's verdict here."""
    pending = _PENDING.get()
    assert pending is not None
    tool = await server.get_tool(name, version=version) if isinstance(name, str) else None
    child = _child_server(tool)
    if child is not None:  # a mounted server's tool: its own chain runs next, decided there
        _guard(child)
        return await proceed()
    if tool is None:  # unknown or hidden: FastMCP answers it, and nothing runs
        return await proceed()
    pending.passes += 1
    if pending.passes > 1 or pending.closed:
        from fastmcp.exceptions import ToolError

        log.warning(
            "keyed call %r reached its tool a second time, or after it was answered (a "
            "middleware calling call_next again or later); that pass was refused, not run",
            name,
        )
        raise ToolError("a keyed call reaches its tool once; this pass was not run")
    pending.reached.set_result(None)
    if not await pending.verdict:
        return pending.placeholder
    inner = _PENDING.set(None)  # the tool's own nested calls are not this keyed call
    try:
        return await proceed()
    finally:
        _PENDING.reset(inner)


def _mark_memory_transport(lowlevel: Any) -> None:
    """`Client(server)` (FastMCP's in-memory transport) serves a local, in-process client."""
    inner = lowlevel.run

    def run(*args: Any, **kwargs: Any) -> Any:
        if declared_local_transport() is None and sdk.called_from_memory_transport(1):
            with local_transport("memory"):  # read by the mcp2 wrapper when it is called
                return inner(*args, **kwargs)
        return inner(*args, **kwargs)

    lowlevel.run = run


@contextlib.contextmanager
def _all_components_visible() -> Iterator[None]:
    """For the docs: list every tool, not only those an anonymous HTTP caller may see.

    FastMCP skips component `auth=` checks on stdio (the local user is trusted there).
    """
    token = sdk.set_transport("stdio")
    try:
        yield
    finally:
        sdk.reset_transport(token)


def issuer(server: Any) -> str | None:
    """The issuer `by_auth_subject` falls back on when a token carries no `iss`."""
    return _issuer(server)


def finish(lowlevel: Any, tools: FastMCPTools) -> None:
    """After the mcp2 adapter hooked `lowlevel`: what FastMCP needs besides."""
    lowlevel.middleware.insert(0, _Edge(tools))
    _mark_memory_transport(lowlevel)
    patches.bypass_response_cache(_KEYED_CALL.get)


def watch(server: Any, installation: Any) -> None:
    """Note the transport `run()` / `http_app()` serve, for the start-up scope check."""
    from ._serving import watch_entry_points

    def stateless_default() -> bool:
        try:
            import fastmcp

            return bool(fastmcp.settings.stateless_http)
        except Exception:
            return False

    watch_entry_points(
        server,
        installation,
        authenticated=lambda: getattr(server, "auth", None) is not None,
        stateless_default=stateless_default,
        modern_era=True,
    )
