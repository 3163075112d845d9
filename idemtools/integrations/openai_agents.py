"""Keys from the OpenAI Agents SDK's MCP servers (`openai-agents`): `keyed(server)`.

    from agents.mcp import MCPServerStreamableHttp
    from idemtools.integrations.openai_agents import keyed

    server = keyed(MCPServerStreamableHttp({"url": url}, max_retry_attempts=3))
    agent = Agent(name="shop", mcp_servers=[server])

The framework's retry path (read in openai-agents 0.24): `MCPServer.call_tool(name, arguments)`
is one logical call. With `max_retry_attempts > 0` it calls `session.call_tool(name, arguments)`
again after *any* exception — `_run_with_retries` on the server's one session for stdio and
SSE; for streamable HTTP, a timeout, a closed connection or a 5xx on the shared session is
retried on a freshly created, isolated `ClientSession` (`_call_tool_with_session`), not
`self.session`. None of those attempts sends a key, so a timed-out charge is charged again.

The rule here: one key per `MCPServer.call_tool`, sent by every attempt inside it whichever
session carries it (`idemtools.client.keyed_session.operation`). A timeout inside the loop is
exactly the unknown outcome the key is for, so the retry replays or waits out `in_progress`
instead of running again. When the whole call ends with an unknown outcome (the retries ran
out) and the model calls the tool again with equal arguments within the window, that call
reuses the key too (`KeyedSession`'s rule); a definite answer makes the next equal call a new
operation.

The hooks: `server.call_tool` (public) and, where the class retries on isolated sessions,
`_call_tool_with_session(session, tool_name, arguments, meta)` (private): `keyed()` checks it is
there with that shape and refuses the server otherwise (fail closed: never silently unkeyed).
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from agents.mcp import MCPServer  # type: ignore[import-not-found,unused-ignore]  # an optional extra

from ..client.keyed_session import (
    DEFAULT_IN_PROGRESS_WAIT,
    DEFAULT_WINDOW,
    KeyedSession,
    RetryKeys,
    operation,
)

__all__ = ["keyed"]

S = TypeVar("S", bound=MCPServer)

_ISOLATED_HOOK = "_call_tool_with_session"
_HOOK_PARAMETERS = ["self", "session", "tool_name", "arguments", "meta"]
_MARK = "_idemtools_keyed"


def _check_hooks(server: MCPServer) -> bool:
    """Whether the server retries on sessions of its own (the private hook), checked for shape."""
    cls = type(server)
    if not hasattr(cls, "_isolated_client_session"):
        return False
    hook = getattr(cls, _ISOLATED_HOOK, None)
    shape = list(inspect.signature(hook).parameters) if callable(hook) else None
    if shape != _HOOK_PARAMETERS:
        raise TypeError(
            f"idemtools cannot key {cls.__name__}: it retries on isolated sessions, but its "
            f"{_ISOLATED_HOOK}{'(' + ', '.join(shape) + ')' if shape else ''} is not the "
            f"{_ISOLATED_HOOK}({', '.join(_HOOK_PARAMETERS)}) idemtools was built against "
            "(openai-agents changed its retry path); a retry would go out without the key"
        )
    return True


def keyed(
    server: S,
    *,
    retry_keys: RetryKeys | None = None,
    window: float = DEFAULT_WINDOW,
    require_capability: bool = True,
    in_progress_wait: float = DEFAULT_IN_PROGRESS_WAIT,
) -> S:
    """Make `server` send one `idempotencyKey` per logical `call_tool`, on every retry of it.

    Returns the same server object (its `call_tool` is wrapped on the instance), so it goes
    into `Agent(mcp_servers=[...])` as before. Options as for `KeyedSession`;
    `require_capability=True` (default) refuses to call a server that does not advertise
    `capabilities.tools.idempotency`, since it would ignore the key.
    """
    if not isinstance(server, MCPServer) or not hasattr(server, "session"):
        raise TypeError(f"keyed() takes an agents.mcp MCPServer, got {type(server).__name__}")
    if getattr(server, _MARK, False):
        return server
    isolated = _check_hooks(server)
    keys = retry_keys if retry_keys is not None else RetryKeys(window)

    def wrap(session: Any) -> Any:
        if session is None or isinstance(session, KeyedSession):
            return session
        return KeyedSession(
            session,
            retry_keys=keys,
            require_capability=require_capability,
            in_progress_wait=in_progress_wait,
        )

    original_call = server.call_tool

    async def call_tool(
        tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> Any:
        # The shared session may have been (re)connected since the last call.
        vars(server)["session"] = wrap(getattr(server, "session", None))
        with operation(keys, tool_name, arguments):
            return await original_call(tool_name, arguments, meta)

    vars(server)["call_tool"] = call_tool
    original_connect: Any = server.connect  # untyped in openai-agents

    async def connect() -> None:
        await original_connect()
        # Keyed from the start, so that tools/list is read on the way (published retentions
        # cap the window).
        vars(server)["session"] = wrap(getattr(server, "session", None))

    vars(server)["connect"] = connect
    if isolated:
        original_hook = getattr(server, _ISOLATED_HOOK)

        async def call_tool_with_session(
            session: Any,
            tool_name: str,
            arguments: dict[str, Any] | None,
            meta: dict[str, Any] | None = None,
        ) -> Any:
            return await original_hook(wrap(session), tool_name, arguments, meta)

        vars(server)[_ISOLATED_HOOK] = call_tool_with_session
    vars(server)[_MARK] = True
    return server
