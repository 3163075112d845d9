"""FastMCP servers built for one test, with counters of what their tools really executed.

Import only after `require_fastmcp()`: the main test environment has no fastmcp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import anyio
from fastmcp import FastMCP

import idemtools
from idemtools import Policy, by_client_id, idempotent, shared
from idemtools.stores.base import Store


@dataclass
class App:
    server: Any
    installation: idemtools.Installation
    runs: list[tuple[str, Any]] = field(default_factory=list)
    gate: anyio.Event = field(default_factory=anyio.Event)
    started: anyio.Event = field(default_factory=anyio.Event)

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.runs if name == tool)


def make_app(
    *,
    auth: Any = None,
    middleware: list[Any] | None = None,
    child_middleware: list[Any] | None = None,
    store: Store | None = None,
    mount: bool = True,
    **install_options: Any,
) -> App:
    """A FastMCP server: `charge` (by_auth_subject), `fail` (isError), `slow` (waits for the
    gate), `pay` (`name=` override, scope `shared`), and, mounted under namespace `child`
    with a `tool_names` rename, `child_send` and `child_ship` (scope `shared`).

    The default policy scopes by OAuth client id, which a local transport never has: a
    keyed call that works on `pay`, `child_send` or `child_ship` proves that the tool's own
    `@idempotent` policy was found through FastMCP's renames and mounts.
    """
    server: Any = FastMCP("fastmcp-test", auth=auth)
    for mw in middleware or []:
        server.add_middleware(mw)
    holder: dict[str, App] = {}

    def ran(tool: str, arguments: Any) -> int:
        app = holder["app"]
        app.runs.append((tool, arguments))
        return len(app.runs)

    @server.tool
    @idempotent(retention=timedelta(hours=1))
    def charge(amount: int) -> str:
        return f"charged {amount} (run {ran('charge', amount)})"

    @server.tool
    @idempotent
    def fail(reason: str) -> str:
        ran("fail", reason)
        raise ValueError(f"declined: {reason}")

    @server.tool
    @idempotent
    async def slow(n: int) -> str:
        app = holder["app"]
        ran("slow", n)
        app.started.set()
        await app.gate.wait()
        return f"slow {n}"

    @server.tool(name="pay")
    @idempotent(retention=timedelta(minutes=30), scope=shared)
    def charge_card(amount: int) -> str:
        return f"paid {amount} (run {ran('pay', amount)})"

    @server.tool
    def quote(amount: int) -> str:
        return f"quote {amount} (run {ran('quote', amount)})"

    if mount:
        child: Any = FastMCP("child")
        for mw in child_middleware or []:
            child.add_middleware(mw)

        @child.tool
        @idempotent(retention=timedelta(hours=2), scope=shared)
        def ship(order: str) -> str:
            return f"shipped {order} (run {ran('ship', order)})"

        @child.tool
        @idempotent(retention=timedelta(hours=3), scope=shared)
        def send(order: str) -> str:
            return f"sent {order} (run {ran('send', order)})"

        server.mount(child, namespace="child", tool_names={"send": "dispatch"})

    installation = idemtools.install(
        server, store=store, default_policy=Policy(scope=by_client_id), **install_options
    )
    app = App(server, installation)
    holder["app"] = app
    return app


def text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)
