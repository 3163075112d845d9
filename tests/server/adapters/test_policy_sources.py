"""Where a keyed call's policy comes from, per server type.

A server that holds its tools' functions (MCPServer on mcp 2.x, FastMCP on mcp 1.x, standalone
FastMCP 4) takes a tool's policy from its function (`@idempotent`), else from a name declared
to the registry (`name=`, an explicit `registry=`, `Registry.register`), else from the
installation's default. Never from a bare `@idempotent` function elsewhere in the process that
merely shares the tool's name: that entry is only the low-level servers' fallback, since they
have no function to look at. Dispatch (what `on_outcome` is told), `Installation.tools()` (the
generated docs) and the `tools/list` metadata all agree.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

import idemtools
from idemtools import Policy, Registry, default_registry, idempotent, shared
from idemtools.client import NO_RETRY, call_tool
from idemtools.policy import TOOL_META_KEY
from idemtools.server.adapters import SDK2
from tests.e2e.harness import LINE, _Server, memory_wire, types

LEAKED = 600  # the bare function elsewhere in the process
OWN = 1200  # the tool's own @idempotent
DECLARED = 1800  # a name declared to the registry
DEFAULT = 86400  # DEFAULT_POLICY's retention

KINDS = ["mcp2.mcpserver" if LINE == 2 else "mcp1.fastmcp", "fastmcp"]
HAS_FASTMCP = LINE == 2 and importlib.util.find_spec("fastmcp") is not None


@pytest.fixture(autouse=True)
def _restore_default_registry() -> Iterator[None]:
    """Bare `@idempotent` registers in the process-wide registry; leave it as we found it."""
    saved = dict(default_registry._policies), dict(default_registry._entries)
    yield
    default_registry._policies.clear()
    default_registry._policies.update(saved[0])
    default_registry._entries.clear()
    default_registry._entries.update(saved[1])


def bare_elsewhere(name: str) -> None:
    """A function decorated with a bare `@idempotent` in some other module of the process."""

    def fn() -> None:
        return None

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = "somewhere.else"
    idempotent(retention=LEAKED, scope=shared)(fn)


@dataclass
class Seen:
    """What one keyed call to each tool was decided with, and what the server says of it."""

    dispatched: dict[str, float] = field(default_factory=dict)  # on_outcome's policy
    listed: dict[str, float] = field(default_factory=dict)  # tools/list _meta
    documented: dict[str, float] = field(default_factory=dict)  # Installation.tools()
    own: dict[str, bool] = field(default_factory=dict)


def new_server(kind: str, name: str) -> tuple[Any, Any]:
    """A high-level server of `kind` and its tool decorator."""
    if kind == "fastmcp":
        if not HAS_FASTMCP:
            pytest.skip("standalone FastMCP 4 needs fastmcp installed (mcp 2.x)")
        from fastmcp import FastMCP

        server: Any = FastMCP(name)
        return server, server.tool
    server = _Server(name)
    return server, server.tool()


async def seen_on(kind: str, server: Any, tools: list[str], **options: Any) -> Seen:
    seen = Seen()

    def told(tool: str, outcome: str, context: Any) -> None:
        seen.dispatched[tool] = context.policy.retention

    installation = idemtools.install(
        server, on_outcome=told, advertise_tool_metadata=True, **options
    )
    for tool in await installation.tools():
        seen.documented[tool.name] = tool.policy.retention
        seen.own[tool.name] = tool.own
    if kind == "fastmcp":
        from fastmcp import Client

        async with Client(server) as client:
            for i, name in enumerate(tools):
                await call_tool(
                    client.session, name, {"amount": 1}, idempotency_key=f"k-{i}", retry=NO_RETRY
                )
            listed = [(t.name, t.meta or {}) for t in await client.list_tools()]
    else:

        class Wired:
            pass

        app: Any = Wired()
        app.server = server
        async with memory_wire(app) as wire:
            for i, name in enumerate(tools):
                reply = await wire.call(
                    {"name": name, "arguments": {"amount": 1}, "idempotencyKey": f"k-{i}"}
                )
                assert "result" in reply, reply
            answer = await wire.request("tools/list", {})
            listed = [(t["name"], t.get("_meta") or {}) for t in answer["result"]["tools"]]
    seen.listed = {name: meta[TOOL_META_KEY]["retentionSeconds"] for name, meta in listed}
    return seen


@pytest.mark.parametrize("kind", KINDS)
async def test_a_bare_function_elsewhere_lends_no_policy_to_a_same_named_tool(kind: str) -> None:
    bare_elsewhere("refund")
    assert default_registry.get("refund") is not None  # the low-level servers' fallback
    server, tool = new_server(kind, "shop")

    @tool
    async def refund(amount: int) -> str:
        return f"refunded {amount}"

    seen = await seen_on(kind, server, ["refund"])
    assert seen.dispatched == {"refund": DEFAULT}
    assert seen.listed == {"refund": DEFAULT}
    assert seen.documented == {"refund": DEFAULT}
    assert seen.own == {"refund": False}


@pytest.mark.parametrize("kind", KINDS)
async def test_two_servers_with_a_same_named_tool_keep_their_own_policies(kind: str) -> None:
    first, tool = new_server(kind, "first")

    @tool
    @idempotent(retention=OWN)  # bare: recorded under "charge" in the process-wide registry
    async def charge(amount: int) -> str:
        return f"first charged {amount}"

    second, tool = new_server(kind, "second")

    async def charge_too(amount: int) -> str:
        return f"second charged {amount}"

    charge_too.__name__ = "charge"  # the same tool name; no @idempotent: the default applies
    tool(charge_too)

    seen_first = await seen_on(kind, first, ["charge"])
    seen_second = await seen_on(kind, second, ["charge"])
    assert (seen_first.dispatched, seen_first.listed, seen_first.documented) == (
        {"charge": OWN},
        {"charge": OWN},
        {"charge": OWN},
    )
    assert (seen_second.dispatched, seen_second.listed, seen_second.documented) == (
        {"charge": DEFAULT},
        {"charge": DEFAULT},
        {"charge": DEFAULT},
    )
    assert seen_first.own == {"charge": True} and seen_second.own == {"charge": False}


@pytest.mark.parametrize("kind", KINDS)
async def test_a_declared_name_still_reaches_a_tool_without_a_policy(kind: str) -> None:
    # A deliberate declaration for the name, in the registry given to install(): honoured.
    registry = Registry()
    registry.register("ship", Policy.of(retention=DECLARED))
    bare_elsewhere("ship")  # the process-wide registry's fallback entry changes nothing
    server, tool = new_server(kind, "declared")

    @tool
    async def ship(amount: int) -> str:
        return f"shipped {amount}"

    @tool
    @idempotent(retention=OWN, registry=registry, name="pack")
    async def pack(amount: int) -> str:
        return f"packed {amount}"

    seen = await seen_on(kind, server, ["ship", "pack"], registry=registry)
    assert seen.dispatched == seen.listed == seen.documented == {"ship": DECLARED, "pack": OWN}
    assert seen.own == {"ship": True, "pack": True}


async def test_a_lowlevel_server_finds_its_policy_by_name() -> None:
    # The low-level server has no function to look at: the name-keyed registry answers.
    registry = Registry()

    @idempotent(name="add", retention=OWN, registry=registry)
    def add_policy() -> None:
        return None

    calls: list[str] = []
    if SDK2:
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(
                tools=[types.Tool(name="add", input_schema={"type": "object"})]
            )

        async def call_tool2(ctx: Any, params: Any) -> Any:
            calls.append(params.name)
            return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

        server: Any = Server("low", on_list_tools=list_tools, on_call_tool=call_tool2)
    else:
        from mcp.server.lowlevel import Server as Server1

        server = Server1("low")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools1() -> list[Any]:
            return [types.Tool(name="add", inputSchema={"type": "object"})]

        @server.call_tool()  # type: ignore[misc]
        async def call_tool1(name: str, arguments: dict[str, Any]) -> list[Any]:
            calls.append(name)
            return [types.TextContent(type="text", text="ok")]

    seen = await seen_on("lowlevel", server, ["add"], registry=registry)
    assert calls == ["add"]
    assert seen.dispatched == seen.listed == {"add": OWN}
    if LINE == 1:  # mcp 2.x's low-level tools/list is asked outside a request only on 1.x
        assert seen.documented == {"add": OWN}
