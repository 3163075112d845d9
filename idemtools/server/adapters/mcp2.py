"""Adapter for the mcp 2.x line: MCPServer and the low-level `Server`, both protocol eras.

mcp 2.x parses `tools/call` params into a model that ignores unknown fields, so an
`idempotencyKey` is silently dropped before any handler runs. The one hook that sees the raw
params, on every transport and in both eras (2025-11-25 `initialize`, 2026-07-28 stateless
`server/discover`), before surface validation, tool lookup, argument validation and the handler,
is the server middleware chain (`Server.middleware`, marked provisional by the SDK). idemtools
appends one middleware there. It also edits the already-serialized `initialize` and
`server/discover` results to advertise `capabilities.tools.idempotency`, because the SDK's typed
capability models (and its per-version wire sieve) drop unknown keys.

What is recorded is the wire dict `call_next` returns. A replay in the other protocol era is
re-enveloped (`resultType` and the `serverInfo` stamp exist only in 2026-07-28), so a client that
retries across eras still gets a well-formed answer and never a second execution.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.direct_dispatcher import DIRECT_TRANSPORT_KIND
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from ... import bridges
from ..._sdk import fields as _fields
from ...engine import Engine, ToolCall
from ...errors import InstallError
from ...outcome import Outcome
from ...policy import TOOL_META_KEY, Policy, policy_of
from ...policy import tool_metadata as policy_tool_metadata
from ...scopes import (
    CallContext,
    LocalTransport,
    Transport,
    declared_local_transport,
    local_transport,
    sdk_session_id,
)
from . import sdk_mcp2 as sdk
from ._adapted import Adapted, ListTools
from ._auth import auth_info, configured_issuer
from ._contact import SDKContactError
from ._validated import Values, validator_of
from .patches import declare_key_field

__all__ = ["IdempotencyMiddleware", "ToolLookup", "adapt", "declare_key_field"]

log = logging.getLogger("idemtools")

_LIST_PAGE_CAP = 100
"""Pages of `tools/list` read at most when checking whether a tool exists."""


def _self_test() -> None:
    params = types.CallToolRequestParams.model_validate(
        {"name": "t", "arguments": {}, "idempotencyKey": "k"}, by_name=False
    )
    if _fields.read_key(params) != "k":
        raise InstallError("declared idempotencyKey is dropped by this mcp version's parser")
    dumped = types.CallToolRequest(params=params).model_dump(
        by_alias=True, mode="json", exclude_none=True
    )
    if dumped["params"].get(_fields.WIRE_NAME) != "k":
        raise InstallError("declared idempotencyKey does not reach the wire on this mcp version")


def _token(request: Any) -> Any:
    """The validated access token of an HTTP request (the ASGI scope's user), if any."""
    return getattr(getattr(request, "scope", {}).get("user"), "access_token", None)


def _transport(session: Any, request: Any) -> Transport:
    """The transport of a request: `ctx.session` and `ctx.request`, read once by `_context`."""
    if request is not None:
        return "http" if getattr(request, "scope", {}).get("type") == "http" else "unknown"
    # The 2026-07-28 era over a stream pair wraps the loop's context (no server requests).
    outbound = sdk.outbound(session)
    kind = outbound.transport.kind  # public: the dispatch context's transport metadata
    if kind == DIRECT_TRANSPORT_KIND:  # the SDK's in-process Client: no wire at all
        return "memory"
    if kind == "jsonrpc":  # a stream pair: local only when identified as such
        stream = sdk.write_stream(outbound)
        entry = _LOCAL_STREAMS.get(id(stream)) if stream is not None else None
        if entry is not None and entry[0] is stream:
            return entry[1]
        return declared_local_transport() or "unknown"
    return "unknown"


def _session_id(version: str, session: Any) -> str | None:
    """The SDK's `Connection` for this request, when it is a session: a handshake completed
    on it (stateful HTTP, SSE, stdio). Stateless HTTP builds a fresh connection per request
    with no handshake, and the 2026-07-28 era has no sessions: None, never a header."""
    if version in MODERN_PROTOCOL_VERSIONS:
        return None
    connection = sdk.connection(session)
    # Public on Connection (what `ServerSession.client_params` returns, one property less).
    if connection.client_params is None:  # no handshake, no session
        return None
    return sdk_session_id(connection)


def _context(ctx: Any, issuer: str | None, name: str, arguments: Any) -> CallContext:
    request = ctx.request
    session = ctx.session
    token = _token(request) if request is not None else None
    return CallContext(
        _transport(session, request),
        auth_info(token, issuer) if token is not None else None,
        _session_id(ctx.protocol_version, session),
        name,
        arguments,
        ctx,
    )


def _error_outcome(exc: BaseException) -> Outcome:
    if isinstance(exc, MCPError):
        return Outcome(error=exc.error.model_dump(mode="json", exclude_none=True))
    if isinstance(exc, ValidationError):  # what the SDK answers for malformed params
        return Outcome.of_error(types.INVALID_PARAMS, "Invalid request parameters", "")
    log.exception("tools/call raised inside the middleware chain", exc_info=exc)
    return Outcome.of_error(types.INTERNAL_ERROR, "Internal server error")


class _InnermostList(list):  # type: ignore[type-arg]
    """`Server.middleware` that keeps idemtools the innermost (last) middleware.

    Why: a replay is answered from the record without calling the rest of the chain, so any
    middleware inside idemtools (an authorization or rate-limit check added after
    `install()`) would be skipped by every replay. Whatever the order of `install()` and
    `middleware.append(...)`, `insert`, `extend` or `+=`, the user's middlewares end up outside
    (before) idemtools, so every call, replayed or executed, passes through all of them.
    """

    def __init__(self, items: Any, ours: Any) -> None:
        super().__init__(items)
        self._ours = ours
        self._settle()

    def _settle(self) -> None:
        ours = self._ours
        if any(m is ours for m in self) and self[-1] is not ours:
            super().remove(ours)
            super().append(ours)

    def append(self, item: Any) -> None:
        if item is not self._ours and any(m is self._ours for m in self):
            super().insert(len(self) - 1, item)
        else:
            super().append(item)
            self._settle()

    def insert(self, index: Any, item: Any) -> None:
        super().insert(index, item)
        self._settle()

    def extend(self, items: Any) -> None:
        for item in list(items):
            self.append(item)

    def __iadd__(self, items: Any) -> Any:  # type: ignore[misc]
        self.extend(items)
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        super().__setitem__(index, value)
        self._settle()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        super().sort(*args, **kwargs)
        self._settle()

    def reverse(self) -> None:
        super().reverse()
        self._settle()


def _keep_innermost(lowlevel: Any, ours: Any) -> bool:
    """Re-guard `lowlevel.middleware` if it was replaced; True when idemtools was not last."""
    chain = lowlevel.middleware
    was_last = bool(chain) and chain[-1] is ours
    if not isinstance(chain, _InnermostList):
        lowlevel.middleware = _InnermostList(chain, ours)
    return not was_last


class ToolLookup(Protocol):
    """How a framework built on this SDK line (the standalone FastMCP) finds its tools: the
    middleware asks it instead of the SDK's tool manager. The router in `adapters/__init__`
    passes one in, so framework adapters and this one never import each other."""

    passes_unknown: bool
    """True: a keyed call for a tool `find` does not know goes to the framework untouched."""

    async def find(self, name: str) -> tuple[bool, Policy | None]: ...

    async def unknown(self, name: str, known_before: bool) -> bool: ...

    async def values_of(self, name: str) -> Values | None:
        """What the framework's own argument validation gives tool `name`, for a derived key
        (`bridges.resolve`); None: no validation to reuse (the arguments as sent)."""
        ...

    # Optional: `async decide(engine, call, run) -> Outcome`, called instead of
    # `engine.handle(call, run)` where the framework decides the call itself, further in.


class IdempotencyMiddleware:
    """The server middleware that puts the SEP-3182 engine in front of `tools/call`."""

    def __init__(
        self,
        lowlevel: Any,
        engine: Engine,
        tool_manager: Any,
        issuer: str | None = None,
        *,
        tool_metadata: bool = False,
        lookup: ToolLookup | None = None,
    ) -> None:
        self.lowlevel = lowlevel
        self.engine = engine
        self.tool_manager = tool_manager
        self.issuer = issuer
        self.tool_metadata = tool_metadata
        self.lookup = lookup
        # A framework may decide the call further in, after its own middleware (FastMCP);
        # looked up once here, not per call.
        self.decide: (
            Callable[[Engine, ToolCall, Callable[[], Awaitable[Outcome]]], Awaitable[Outcome]]
            | None
        ) = getattr(lookup, "decide", None)
        self.passes_unknown = lookup.passes_unknown if lookup is not None else False
        """When True, a keyed call for a tool `find` does not know bypasses the engine."""
        self.by_name = tool_manager is None and lookup is None
        """A low-level server: no tool function to find, so the registry answers by name."""
        self._by_method: dict[str, Callable[[Any, Any], Awaitable[Any]]] = {
            "tools/call": self.on_call_tool,
            "tools/list": self.on_list_tools,
            "initialize": self.on_handshake,
            "server/discover": self.on_handshake,
        }

    async def with_metadata(self, ctx: Any, result: Any) -> Any:
        """Publish each listed tool's policy under `_meta[TOOL_META_KEY]` (opt-in), and the key
        argument of a tool that has one in its input schema (`idemtools.bridges`)."""
        tools = result.get("tools") if isinstance(result, dict) else None
        if not isinstance(tools, list):
            return result
        listed = []
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                name = tool["name"]
                _, own = await self.find(ctx, name)
                policy = self.engine.policy_for(name, own, by_name=self.by_name)
                if policy.key_argument is not None or policy.key_from:
                    bridges.BRIDGED.add(name)  # found under a name its decorator did not know
                    tool = {
                        **tool,
                        "inputSchema": bridges.with_key_argument(tool.get("inputSchema"), policy),
                    }
                if self.tool_metadata:
                    meta = tool.get("_meta")
                    tool = {
                        **tool,
                        "_meta": {
                            **(meta if isinstance(meta, dict) else {}),
                            TOOL_META_KEY: policy_tool_metadata(policy),
                        },
                    }
            listed.append(tool)
        return {**result, "tools": listed}

    async def find(self, ctx: Any, name: str) -> tuple[bool, Policy | None]:
        """Whether the server has tool `name` (as far as a lookup can tell) and its own policy.

        A framework's `lookup` if there is one. MCPServer: its tool manager. Low-level server:
        unknown here (its handler decides).
        """
        if self.lookup is not None:
            return await self.lookup.find(name)
        tool = self.tool_manager.get_tool(name) if self.tool_manager is not None else None
        if tool is None:
            return False, None
        return True, policy_of(getattr(tool, "fn", None))

    async def values_of(self, name: str) -> Values | None:
        """What the SDK's validation gives the tool, for a derived key: MCPServer's tools, or a
        framework's (its `lookup`); None: a low-level handler (the arguments as sent)."""
        if self.lookup is not None:
            return await self.lookup.values_of(name)
        if self.tool_manager is None:
            return None
        return validator_of(self.tool_manager.get_tool(name))

    async def unknown(self, ctx: Any, name: str, known_before: bool) -> bool:
        """After an error answer: was `name` a tool this server does not have?

        Such a call executed nothing, so it is answered but not recorded: a rolling deploy that
        adds the tool must not replay "Unknown tool". MCPServer: absent from its tool manager
        before and after the call. Low-level server: not in its own `tools/list` answer (the
        handler is the server's code; a tool it lists may have run before failing). Any doubt
        (no listing, a listing that fails) counts as known: the answer is recorded.
        """
        if self.lookup is not None:
            return await self.lookup.unknown(name, known_before)
        if self.tool_manager is not None:
            return not known_before and self.tool_manager.get_tool(name) is None
        entry = self.lowlevel.get_request_handler("tools/list")
        if entry is None:
            return False
        cursor: str | None = None
        try:
            for _ in range(_LIST_PAGE_CAP):
                page = await entry.handler(ctx, types.PaginatedRequestParams(cursor=cursor))
                if any(tool.name == name for tool in page.tools):
                    return False
                cursor = page.next_cursor
                if cursor is None:
                    return True
        except Exception:
            log.warning("tools/list failed while checking tool %r; its answer is recorded", name)
        return False

    # -- per method, as the SDK dispatches: every request passes through `__call__` ---------

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        handler = self._by_method.get(ctx.method)
        if handler is None:  # every other method: through untouched
            return await call_next(ctx)
        return await handler(ctx, call_next)

    async def on_handshake(self, ctx: Any, call_next: Any) -> Any:
        """`initialize` and `server/discover`: advertise `capabilities.tools.idempotency`."""
        result = await call_next(ctx)
        return result if ctx.request_id is None else _fields.advertise(result)

    async def on_list_tools(self, ctx: Any, call_next: Any) -> Any:
        """`tools/list`: each tool's policy (opt-in) and key argument, where there are any."""
        decorate = self.tool_metadata or bool(bridges.BRIDGED)
        result = await call_next(ctx)
        return await self.with_metadata(ctx, result) if decorate else result

    async def on_call_tool(self, ctx: Any, call_next: Any) -> Any:
        """`tools/call`: a keyed call goes through the engine, any other straight through."""
        keyed = _keyed(ctx.params, ctx.request_id)
        if keyed is None:
            return await call_next(ctx)
        self._check_innermost()
        name, key, arguments = keyed
        known, policy = await self.find(ctx, name)
        if not known and self.passes_unknown:
            return await call_next(ctx)  # no such tool for this caller: nothing runs or records
        source: bridges.KeySource = "sep"
        if name in bridges.BRIDGED:  # a key argument or a derived key (outside the SEP)
            found = self.engine.policy_for(name, policy, by_name=self.by_name)
            values = await self.values_of(name) if key is None and found.key_from else None
            bridge = bridges.resolve(found, name, key, arguments, values)
            if bridge.changed:  # the function does not ask for the key argument
                ctx = dataclasses.replace(ctx, params={**ctx.params, "arguments": bridge.passed})
            if bridge.key is None:
                return await call_next(ctx)  # neither key: unprotected, as any unkeyed call
            key, source, arguments = bridge.key, bridge.source, bridge.arguments
        if policy is None and not self.by_name:  # never a same-named function's, elsewhere
            policy = self.engine.policy_for(name, by_name=False)
        call = ToolCall(name, arguments, key, self._context(ctx, name, arguments), policy, source)
        run = functools.partial(self._run, ctx, call_next, name, known)
        if self.decide is not None:
            outcome = await self.decide(self.engine, call, run)
        else:
            outcome = await self.engine.handle(call, run)
        return self._answer(ctx, outcome)

    # -- the phases of a keyed call ----------------------------------------------------------

    def _check_innermost(self) -> None:
        """Refuse the call when `Server.middleware` was replaced wholesale: a middleware inside
        idemtools would not see replays. Fail closed for this call; the chain is put right for
        the next."""
        chain = self.lowlevel.middleware
        if isinstance(chain, _InnermostList) and chain[-1] is self:
            return
        if not _keep_innermost(self.lowlevel, self):
            return
        log.error(
            "idemtools was not the innermost server middleware (Server.middleware was "
            "replaced); refused a keyed call. Add middlewares with middleware.append() "
            "or insert(), before or after install(): idemtools keeps itself last"
        )
        raise MCPError(
            types.INTERNAL_ERROR,
            "idemtools was not the innermost server middleware; the call was not run, retry it",
        )

    def _context(self, ctx: Any, name: str, arguments: Any) -> CallContext:
        try:
            return _context(ctx, self.issuer, name, arguments)
        except SDKContactError as exc:  # a live-session internal is gone: fail closed
            log.error("%s", exc)
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None

    async def _run(self, ctx: Any, call_next: Any, name: str, known: bool) -> Outcome:
        """The one execution: the rest of the chain, its answer as an `Outcome`."""
        try:
            result = await call_next(ctx)
        except Exception as exc:
            outcome = _error_outcome(exc)
            if await self.unknown(ctx, name, known):
                return Outcome(error=outcome.error, final=False)
            return outcome
        if not isinstance(result, dict):
            return Outcome.of_error(types.INTERNAL_ERROR, "Internal server error")
        final = result.get("resultType", "complete") != "input_required"
        if final and result.get("isError") and await self.unknown(ctx, name, known):
            final = False  # an unknown tool ran nothing: answered, not recorded
        return Outcome(result, None, final)

    def _answer(self, ctx: Any, outcome: Outcome) -> Any:
        """The engine's outcome as the SDK expects it back: a result dict, or an `MCPError`.

        No cancellation checkpoint first: since mcp 2.0 the SDK itself never answers a request
        its client cancelled (the handler's result is dropped), and a caller cancelled while
        the engine waits raises there.
        """
        if outcome.error is not None:
            error = outcome.error
            raise MCPError(error["code"], error["message"], error.get("data"))
        assert outcome.result is not None
        if outcome.replayed:
            return _envelope(outcome.result, ctx.protocol_version, self.lowlevel)
        return outcome.result


def _keyed(params: Any, request_id: Any) -> tuple[str, Any, Any] | None:
    """(name, key, arguments) of a `tools/call` the engine decides, else None (it goes
    straight through): a request with a key, or for a tool with a key bridge."""
    if not params or request_id is None:  # no params, or a notification
        return None
    key = params.get(_fields.WIRE_NAME)
    bridged = bridges.BRIDGED  # empty unless a tool uses a key bridge
    if key is None and not bridged:
        return None
    # MRTR continuations are outside SEP-3182 (its Scope section): run, touch no record.
    # Only a non-null field makes a continuation: `"requestState": null` means absent.
    if params.get("requestState") is not None or params.get("inputResponses") is not None:
        return None
    name = params.get("name")
    arguments = params.get("arguments")
    if not isinstance(name, str) or not (isinstance(arguments, dict) or arguments is None):
        return None  # malformed params: the SDK refuses them as it always does
    if key is None and name not in bridged:
        return None
    return name, key, arguments


_LOCAL_STREAMS: dict[int, tuple[Any, LocalTransport]] = {}
"""id(write stream) → (the stream, its local transport), while a local `Server.run` serves it."""


def _mark_local_entry_points(server: Any, lowlevel: Any) -> None:
    """Identify the SDK's own local transports positively, for `by_auth_subject`.

    `MCPServer.run_stdio_async` (and so `run("stdio")`) is wrapped in `local_transport("stdio")`;
    `lowlevel.run` called from the SDK's in-memory transport (`Client(server, mode="legacy")`)
    is "memory"; a `lowlevel.run` started inside `local_transport(...)` is that transport. mcp
    2.x runs each request in the context of the task that *sent* it, not of `run`, so the
    verdict is kept by the write stream `run` serves, which the request's dispatcher holds.
    """
    run_stdio = getattr(server, "run_stdio_async", None)
    if run_stdio is not None and server is not lowlevel:

        async def run_stdio_async(*args: Any, **kwargs: Any) -> None:
            with local_transport("stdio"):  # FastMCP passes show_banner=, log_level=...
                await run_stdio(*args, **kwargs)

        server.run_stdio_async = run_stdio_async
    original_run = lowlevel.run

    def run(*args: Any, **kwargs: Any) -> Any:
        kind = declared_local_transport()
        if kind is None:
            kind = "memory" if sdk.called_from_sdk_memory(1) else None
        coro = original_run(*args, **kwargs)
        stream = args[1] if len(args) > 1 else kwargs.get("write_stream")
        if kind is None or stream is None:
            return coro
        return _serve_local(kind, stream, coro)

    lowlevel.run = run


async def _serve_local(kind: LocalTransport, stream: Any, coro: Any) -> Any:
    _LOCAL_STREAMS[id(stream)] = (stream, kind)
    try:
        return await coro
    finally:
        entry = _LOCAL_STREAMS.get(id(stream))
        if entry is not None and entry[0] is stream:
            del _LOCAL_STREAMS[id(stream)]


def _envelope(result: dict[str, Any], version: str, lowlevel: Any) -> dict[str, Any]:
    """Fit a recorded wire result to the era of the request replaying it.

    `result` was just decoded from the store, so it is ours to change in place.
    """
    meta = result.get("_meta")
    if version in MODERN_PROTOCOL_VERSIONS:
        result.setdefault("resultType", "complete")
        if not (isinstance(meta, dict) and types.SERVER_INFO_META_KEY in meta):
            stamp = lowlevel.server_info_stamp
            result["_meta"] = {
                **(meta if isinstance(meta, dict) else {}),
                types.SERVER_INFO_META_KEY: stamp,
            }
    else:
        result.pop("resultType", None)
        if isinstance(meta, dict) and types.SERVER_INFO_META_KEY in meta:
            rest = {k: v for k, v in meta.items() if k != types.SERVER_INFO_META_KEY}
            if rest:
                result["_meta"] = rest
            else:
                result.pop("_meta")
    return result


def adapt(
    server: Any,
    lowlevel: Any,
    engine: Engine,
    *,
    declare_field: bool,
    tool_metadata: bool = False,
    lookup: ToolLookup | None = None,
    issuer: str | None = None,
    kind: str | None = None,
    list_tools: ListTools | None = None,
) -> Adapted:
    """Hook `lowlevel`; `lookup`, `issuer`, `kind` and `list_tools` let a framework built on
    this SDK line (FastMCP) bring its own tools and auth (see `ToolLookup`)."""
    if any(isinstance(m, IdempotencyMiddleware) for m in lowlevel.middleware):
        raise InstallError("idemtools is already installed on this server")
    sdk.probe(server, lowlevel)  # fail closed on a changed internal, before hooking anything
    if declare_field:
        declare_key_field()
        _self_test()
    tool_manager = sdk.tool_manager(server)
    for tool in tool_manager.list_tools() if tool_manager is not None else ():
        bridges.note(tool.name, policy_of(tool.fn))  # a tool renamed from its function's name
    middleware = IdempotencyMiddleware(
        lowlevel,
        engine,
        tool_manager,
        issuer if issuer is not None else configured_issuer(server),
        tool_metadata=tool_metadata,
        lookup=lookup,
    )
    _mark_local_entry_points(server, lowlevel)
    lowlevel.middleware = _InnermostList([*lowlevel.middleware, middleware], middleware)
    original_caps = lowlevel.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        # initialize and server/discover pass here: put back a middleware someone removed, and
        # keep it innermost if the list was replaced.
        if not any(m is middleware for m in lowlevel.middleware):
            lowlevel.middleware.append(middleware)
        _keep_innermost(lowlevel, middleware)
        return original_caps(*args, **kwargs)

    lowlevel.get_capabilities = get_capabilities

    async def sdk_list_tools() -> list[tuple[str, Policy | None, dict[str, Any] | None]]:
        if tool_manager is None:  # the low-level server: what its own tools/list answers
            return await _listed_tools(lowlevel)
        return [(t.name, policy_of(t.fn), t.parameters) for t in tool_manager.list_tools()]

    if kind is None:
        kind = "mcp2.mcpserver" if tool_manager is not None else "mcp2.lowlevel"
    return Adapted(
        kind,
        list_tools or sdk_list_tools,
        lifespan_owner=lowlevel,
        transport_owners=(server, lowlevel),
        by_name=middleware.by_name,
    )


async def _listed_tools(
    lowlevel: Any,
) -> list[tuple[str, Policy | None, dict[str, Any] | None]]:
    """A low-level server's tools as its `tools/list` handler answers, asked outside a request.

    Not the name-keyed registry: that holds every `@idempotent` name imported anywhere in the
    process, which documented tools this server does not serve. The handler gets a context
    with no session (there is no client); one that needs it fails here, loudly.
    """
    from mcp.server.context import ServerRequestContext

    entry = lowlevel.get_request_handler("tools/list")
    if entry is None:
        return []
    ctx: Any = ServerRequestContext(
        session=None,  # type: ignore[arg-type]
        lifespan_context={},
        protocol_version=types.LATEST_PROTOCOL_VERSION,
        method="tools/list",
    )
    listed: list[tuple[str, Policy | None, dict[str, Any] | None]] = []
    cursor: str | None = None
    for _ in range(_LIST_PAGE_CAP):
        page = await entry.handler(ctx, types.PaginatedRequestParams(cursor=cursor))
        listed += [(tool.name, None, dict(tool.input_schema)) for tool in page.tools]
        cursor = page.next_cursor
        if cursor is None:
            break
    return listed
