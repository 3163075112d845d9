"""`assert_protected` and its helpers (see the package)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._sdk import SDK2
from ..client.call import NO_RETRY, advertises_idempotency, call_tool
from ..errors import RefusedError
from ..server.adapters import lowlevel_of
from ..server.installation import installation_of

__all__ = ["NotProtectedError", "Protection", "assert_protected", "connect"]


class NotProtectedError(AssertionError):
    """The server would run a keyed retry twice; the message says what is missing.

    An `AssertionError`, so test runners report it as a failed check, not a crash.
    """


@dataclass(frozen=True)
class Protection:
    """What `assert_protected` saw, for further assertions of your own."""

    first: Any
    """The `CallToolResult` of the call that ran the tool."""
    retry: Any
    """The `CallToolResult` the retry received: the replayed answer."""
    key: str
    """The idempotency key both calls carried."""


@contextlib.asynccontextmanager
async def connect(server: Any) -> AsyncIterator[Any]:
    """A client session connected in-process to `server`, on the installed mcp line.

    mcp 1.x: a `ClientSession` (FastMCP or the low-level `Server`); mcp 2.x: a `Client`
    (MCPServer or the low-level `Server`) in the 2025-11-25 era, the one every client speaks;
    a standalone FastMCP 4.x server: a `fastmcp.Client` over its in-memory transport.
    """
    if SDK2 and type(server).__module__.startswith("fastmcp."):
        # A standalone FastMCP server: its own in-memory client (the SDK's `Client` does not
        # take one).
        from fastmcp import Client as FastMCPClient

        async with FastMCPClient(server) as fastmcp_client:
            yield fastmcp_client
    elif SDK2:
        from mcp.client import Client

        async with Client(server, mode="legacy") as client:
            yield client
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        lowlevel = lowlevel_of(server) or server
        async with create_connected_server_and_client_session(lowlevel) as session:
            yield session


def _wire(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    meta = dumped.get("_meta")
    if isinstance(meta, dict):  # the opt-in replay marker is the one permitted difference
        rest = {k: v for k, v in meta.items() if k != "io.github.idemtools/replayed"}
        if rest:
            dumped["_meta"] = rest
        else:
            dumped.pop("_meta")
    return dumped


async def assert_protected(
    server: Any,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    key: str | None = None,
) -> Protection:
    """Fail unless a keyed retry of `tool` on `server` is replayed rather than run again.

    Args:
        server: the server object you serve (mcp 1.x FastMCP, MCPServer, the low-level
            `Server`, or a standalone FastMCP 4.x server).
        tool: a tool it lists; it runs once, with `arguments`.
        key: the idempotency key to use (default: a fresh one).

    Raises:
        NotProtectedError: the capability is not advertised (typically: `install(server)`
            was never called), a call was refused, or the retry executed the tool again.
    """
    key = key if key is not None else f"idemtools-testing-{uuid.uuid4()}"
    installation = installation_of(server)
    stats = installation.engine.stats if installation is not None else None
    executions = stats.executions if stats is not None else 0
    replays = stats.replays if stats is not None else 0
    # Failures are raised after the session closed: raised inside it, the SDK's task group
    # would wrap them in an ExceptionGroup and hide the message.
    advertised = False
    refused: RefusedError | None = None
    async with connect(server) as session:
        advertised = await advertises_idempotency(session)
        if advertised:
            try:
                first = await call_tool(
                    session, tool, arguments, idempotency_key=key, retry=NO_RETRY
                )
                retry = await call_tool(
                    session, tool, arguments, idempotency_key=key, retry=NO_RETRY
                )
            except RefusedError as exc:
                refused = exc
    if not advertised:
        raise NotProtectedError(
            f"{type(server).__name__} does not advertise capabilities.tools.idempotency: "
            "keyed retries run twice on it. Call idemtools.install(server) before the "
            "server starts serving (idemtools is not installed on this server object)"
            if installation is None
            else f"{type(server).__name__} has idemtools installed but does not advertise "
            "capabilities.tools.idempotency over the in-memory transport"
        )
    if refused is not None:
        raise NotProtectedError(
            f"the keyed call to {tool!r} was refused ({refused.type}): {refused.message}"
        ) from refused
    if stats is not None and (stats.executions - executions, stats.replays - replays) != (1, 1):
        raise NotProtectedError(
            f"the retry of {tool!r} with the same idempotency key was not replayed: the tool "
            f"ran {stats.executions - executions} time(s), {stats.replays - replays} replay(s). "
            f"Is {tool!r} a tool this server lists?"
        )
    if _wire(first) != _wire(retry):
        raise NotProtectedError(
            f"the retry of {tool!r} got another answer than the call that ran: "
            f"{_wire(retry)!r} != {_wire(first)!r}"
        )
    return Protection(first=first, retry=retry, key=key)
