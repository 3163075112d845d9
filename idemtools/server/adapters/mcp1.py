"""Adapter for the mcp 1.x line: FastMCP and the low-level `Server`.

Interception point: `Server.request_handlers[CallToolRequest]`, the one place that sees the
params (and so the key), runs before tool lookup and input validation, can answer without running
the tool, and can raise `McpError` to send a real JSON-RPC error. FastMCP registers it in its
constructor; a low-level server when `@server.call_tool()` runs. The handler is wrapped where
dispatch looks it up (`sdk_mcp1.guard_dispatch`), so a handler registered or swapped later, by
any means (`[k] = v`, `update`, `|=`, a new dict), is wrapped before it runs. The capability is
added by wrapping the instance's `get_capabilities`, which every transport's `initialize` goes
through.

Auth: the current request's token is `request_context.request.scope["user"].access_token`.
`get_access_token()` is NOT used: on stateful HTTP it reports the token that created the session.
The session for `per_session` is the SDK's `ServerSession` object, never the `Mcp-Session-Id`
header (on stateless HTTP any value passes; on SSE the real session is in the query string).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel
from mcp import types
from mcp.shared.exceptions import McpError

from ... import bridges
from ..._sdk import fields as _fields
from ...engine import Engine, ToolCall
from ...errors import InstallError
from ...outcome import Outcome
from ...policy import TOOL_META_KEY, Policy, policy_of
from ...policy import tool_metadata as policy_tool_metadata
from ...scopes import (
    CallContext,
    Transport,
    declared_local_transport,
    local_transport,
    sdk_session_id,
)
from . import sdk_mcp1 as sdk
from ._adapted import Adapted
from ._auth import auth_info, configured_issuer
from ._validated import validator_of
from .patches import declare_key_field

__all__ = ["adapt", "declare_key_field"]

log = logging.getLogger("idemtools")

Handler = Callable[[Any], Awaitable[Any]]
_MARK = "__idemtools_wrapped__"
_LIST_PAGE_CAP = 100
"""Pages of `tools/list` read at most when checking whether a tool exists."""


def _self_test(declared: bool) -> None:
    """Prove a keyed request survives this SDK's parse (and, if declared, client) path."""
    wire = {"method": "tools/call", "params": {"name": "t", "arguments": {}, "idempotencyKey": "k"}}
    parsed = types.ClientRequest.model_validate(wire).root
    if _fields.read_key(parsed.params) != "k":
        raise InstallError("this mcp version drops idempotencyKey when parsing tools/call")
    if declared:
        params = types.CallToolRequestParams.model_validate(wire["params"])
        sent = types.ClientRequest(types.CallToolRequest(method="tools/call", params=params))
        dumped = sent.model_dump(by_alias=True, mode="json", exclude_none=True)
        if dumped["params"].get(_fields.WIRE_NAME) != "k":
            raise InstallError(
                "declared idempotencyKey does not reach the wire on this mcp version"
            )


def _context(lowlevel: Any, issuer: str | None, name: str, arguments: Any) -> CallContext:
    """Who is asking, from what the SDK itself validated for *this* request.

    transport: "http" when the SDK handed over an HTTP request (streamable HTTP, SSE); a local
    transport only when declared (`local_transport`, set by idemtools around the SDK's own
    stdio and in-memory entry points); anything else, the WebSocket transport included, is
    "unknown". session: the SDK's `ServerSession` object, once it completed the handshake
    (a stateless HTTP request gets a fresh, never-initialized one: no session).
    """
    rc = sdk.request_context(lowlevel)
    if rc is None:
        return CallContext(tool=name, arguments=arguments)
    request = getattr(rc, "request", None)
    auth = None
    transport: Transport
    if request is not None:
        transport = "http" if getattr(request, "scope", {}).get("type") == "http" else "unknown"
        token = getattr(request.scope.get("user"), "access_token", None)
        if token is not None:
            auth = auth_info(token, issuer)
    else:
        transport = declared_local_transport() or "unknown"
    session = getattr(rc, "session", None)
    handshaken = sdk.handshaken(session)
    return CallContext(
        transport=transport,
        auth=auth,
        session_id=sdk_session_id(session) if handshaken else None,
        tool=name,
        arguments=arguments,
        raw=rc,
    )


def _mark_local_entry_points(server: Any, lowlevel: Any) -> None:
    """Declare the SDK's own local transports, so `by_auth_subject` knows them positively.

    `FastMCP.run_stdio_async` (and so `run("stdio")`) serves stdio; the SDK's in-memory helper
    `create_connected_server_and_client_session` calls `lowlevel.run` from mcp.shared.memory.
    Request handlers inherit the context `Server.run` runs in, so a context variable set around
    it marks every call of that connection.
    """
    run_stdio = getattr(server, "run_stdio_async", None)
    if run_stdio is not None and server is not lowlevel:

        async def run_stdio_async() -> None:
            with local_transport("stdio"):
                await run_stdio()

        server.run_stdio_async = run_stdio_async
    original_run = lowlevel.run

    def run(*args: Any, **kwargs: Any) -> Any:
        if declared_local_transport() is None and sdk.called_from_sdk_memory(1):
            return _run_local("memory", original_run(*args, **kwargs))
        return original_run(*args, **kwargs)

    lowlevel.run = run


async def _run_local(kind: Any, coro: Awaitable[Any]) -> Any:
    with local_transport(kind):
        return await coro


def _result_model(result: dict[str, Any]) -> type[Any]:
    task_cls = getattr(types, "CreateTaskResult", None)
    if task_cls is not None and "task" in result and "content" not in result:
        return task_cls  # type: ignore[no-any-return]
    return types.CallToolResult


def adapt(
    server: Any, lowlevel: Any, engine: Engine, *, declare_field: bool, tool_metadata: bool = False
) -> Adapted:
    if getattr(lowlevel, "__idemtools_guard__", False):
        raise InstallError("idemtools is already installed on this server")
    sdk.probe(server, lowlevel)  # fail closed on a changed internal, before hooking anything
    if declare_field:
        declare_key_field()
    _self_test(declare_field)
    tool_manager = sdk.tool_manager(server)
    for tool in tool_manager.list_tools() if tool_manager is not None else ():
        bridges.note(tool.name, policy_of(tool.fn))  # a tool renamed from its function's name
    issuer = configured_issuer(server)
    _mark_local_entry_points(server, lowlevel)

    async def unknown(name: str, known_before: bool) -> bool:
        """After an error answer: was `name` a tool this server does not have?

        Such a call executed nothing, so it is answered but not recorded: a rolling deploy that
        adds the tool must not replay "Unknown tool". FastMCP: absent from its tool manager
        before and after the call. Low-level server: not in its own `tools/list` answer (the
        handler is the server's code; a tool it lists may have run before failing). Any doubt
        (no listing, a listing that fails) counts as known: the answer is recorded.
        """
        if tool_manager is not None:
            return not known_before and tool_manager.get_tool(name) is None
        handler = lowlevel.request_handlers.get(types.ListToolsRequest)
        if handler is None:
            return False
        cursor: str | None = None
        try:
            for _ in range(_LIST_PAGE_CAP):
                params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                result = await handler(types.ListToolsRequest(method="tools/list", params=params))
                page = getattr(result, "root", result)
                if any(tool.name == name for tool in page.tools):
                    return False
                cursor = page.nextCursor
                if cursor is None:
                    return True
        except Exception:
            log.warning("tools/list failed while checking tool %r; its answer is recorded", name)
        return False

    def wrap(inner: Handler) -> Handler:
        async def call_tool(req: Any) -> Any:
            params = req.params
            key = _fields.read_key(params)
            if key is None and not (bridges.BRIDGED and params.name in bridges.BRIDGED):
                return await inner(req)  # unkeyed, no key bridge: one truth test

            # The SDK's own answer and the outcome recorded from it, kept so that the call that
            # ran is answered with that very object rather than a model re-validated from its
            # JSON (a second pydantic pass over the whole result).
            ran: list[Any] = []
            name = params.name
            tool = tool_manager.get_tool(name) if tool_manager is not None else None
            policy = policy_of(getattr(tool, "fn", None)) if tool is not None else None
            if policy is None and tool_manager is not None:  # never a same-named function's
                policy = engine.policy_for(name, by_name=False)
            arguments = params.arguments
            source: bridges.KeySource = "sep"
            if bridges.BRIDGED and name in bridges.BRIDGED:  # a key bridge (outside the SEP)
                found = engine.policy_for(name, policy, by_name=tool_manager is None)
                bridge = bridges.resolve(found, name, key, arguments, validator_of(tool))
                if bridge.changed:  # the function does not ask for the key argument
                    passed = params.model_copy(update={"arguments": bridge.passed})
                    req = req.model_copy(update={"params": passed})
                if bridge.key is None:
                    return await inner(req)  # neither key: unprotected, as any unkeyed call
                key, source, arguments = bridge.key, bridge.source, bridge.arguments

            async def run() -> Outcome:
                try:
                    result = await inner(req)
                except McpError as exc:
                    error = exc.error.model_dump(mode="json", exclude_none=True)
                    return Outcome(error=error, final=not await unknown(name, tool is not None))
                except Exception:
                    # The SDK would send code 0 with the exception text; keep internals private.
                    log.exception("tools/call handler raised")
                    return Outcome.of_error(types.INTERNAL_ERROR, "Internal error")
                root: Any = getattr(result, "root", result)
                dumped = root.model_dump(by_alias=True, mode="json", exclude_none=True)
                # An unknown tool ran nothing: answered, not recorded.
                final = not (dumped.get("isError") and await unknown(name, tool is not None))
                outcome = Outcome(result=dumped, final=final)
                ran[:] = (outcome, result)
                return outcome

            call = ToolCall(
                name=name,
                arguments=arguments,
                key=key,
                context=_context(lowlevel, issuer, name, arguments),
                policy=policy,
                source=source,
            )
            outcome = await engine.handle(call, run)
            # A client that cancelled already got its answer from the SDK; don't answer twice.
            await anyio.lowlevel.checkpoint_if_cancelled()
            if outcome.error is not None:
                raise McpError(types.ErrorData.model_validate(outcome.error))
            if ran and outcome is ran[0]:  # this call ran the tool: its own result, unchanged
                return ran[1]
            assert outcome.result is not None
            model = _result_model(outcome.result)
            return types.ServerResult(model.model_validate(outcome.result))

        setattr(call_tool, _MARK, True)
        call_tool.__wrapped__ = inner  # type: ignore[attr-defined]
        return call_tool

    def with_metadata(tool: Any) -> Any:
        found = tool_manager.get_tool(tool.name) if tool_manager is not None else None
        own = policy_of(getattr(found, "fn", None))
        policy = engine.policy_for(tool.name, own, by_name=tool_manager is None)
        update: dict[str, Any] = {}
        if policy.key_argument is not None or policy.key_from:
            bridges.BRIDGED.add(tool.name)  # found under a name its decorator did not know
            update["inputSchema"] = bridges.with_key_argument(tool.inputSchema, policy)
        if tool_metadata:
            update["meta"] = {**(tool.meta or {}), TOOL_META_KEY: policy_tool_metadata(policy)}
        return tool.model_copy(update=update) if update else tool  # never edit the server's

    def wrap_list(inner: Handler) -> Handler:
        async def list_tools(req: Any) -> Any:
            result = await inner(req)
            if not (tool_metadata or bridges.BRIDGED):
                return result
            root: Any = getattr(result, "root", result)
            if not isinstance(root, types.ListToolsResult):
                return result
            listed = root.model_copy(update={"tools": [with_metadata(t) for t in root.tools]})
            return types.ServerResult(listed) if root is not result else listed

        setattr(list_tools, _MARK, True)
        list_tools.__wrapped__ = inner  # type: ignore[attr-defined]
        return list_tools

    # tools/list is always wrapped: a key argument joins a tool's schema there (a no-op for a
    # process without key bridges or tool metadata).
    wraps: dict[Any, Callable[[Handler], Handler]] = {
        types.CallToolRequest: wrap,
        types.ListToolsRequest: wrap_list,
    }
    for request_type, wrap_one in wraps.items():  # wrapped now, and again at dispatch if replaced
        handler = lowlevel.request_handlers.get(request_type)
        if handler is not None and not getattr(handler, _MARK, False):
            lowlevel.request_handlers[request_type] = wrap_one(handler)
    sdk.guard_dispatch(lowlevel, wraps)
    original_caps = lowlevel.get_capabilities

    def get_capabilities(*args: Any, **kwargs: Any) -> Any:
        caps = original_caps(*args, **kwargs)
        if caps.tools is not None:
            tools = caps.tools.model_dump(by_alias=True, exclude_none=True)
            caps = caps.model_copy(
                update={"tools": types.ToolsCapability.model_validate({**tools, "idempotency": {}})}
            )
        return caps

    lowlevel.get_capabilities = get_capabilities
    lowlevel.__idemtools_guard__ = True

    async def list_tools() -> list[tuple[str, Policy | None, dict[str, Any] | None]]:
        if tool_manager is not None:
            return [(t.name, policy_of(t.fn), t.parameters) for t in tool_manager.list_tools()]
        handler = lowlevel.request_handlers.get(types.ListToolsRequest)
        if handler is None:
            return []
        result = await handler(types.ListToolsRequest(method="tools/list"))
        return [(t.name, None, t.inputSchema) for t in getattr(result, "root", result).tools]

    kind = "mcp1.fastmcp" if tool_manager is not None else "mcp1.lowlevel"
    return Adapted(
        kind,
        list_tools,
        lifespan_owner=lowlevel,
        transport_owners=(server, lowlevel),
        by_name=tool_manager is None,
    )
