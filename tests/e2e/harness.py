"""Test harness: one server shape and raw JSON-RPC wires for whichever mcp line is installed.

Tests speak raw JSON-RPC dicts so they see exactly what goes on the wire: over in-memory streams
(the SDK's own `server.run` loop, 2025-11-25 handshake), and over streamable HTTP (uvicorn on
127.0.0.1, stateful or stateless, both protocol eras on mcp 2.x).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import httpx
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

import idemtools
from idemtools import idempotent, shared
from idemtools.server.adapters import SDK2
from idemtools.server.adapters import lowlevel_of as sdk_lowlevel_of
from idemtools.stores.base import Store

LINE = 2 if importlib.util.find_spec("mcp_types") is not None else 1
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ERAS = [LEGACY, MODERN] if LINE == 2 else [LEGACY]

if SDK2:  # mypy checks one line per run (`--always-true/--always-false SDK2`)
    import mcp_types as types
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer as _Server
else:
    from mcp import types
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.fastmcp import FastMCP as _Server

# The per-line SDK names the tests import from here (re-exported for mypy's strict mode).
__all__ = ["AccessToken", "AuthSettings", "_Server", "types"]

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@dataclass
class App:
    """A server built for one test, with counters of what its tools really executed."""

    server: Any
    installation: idemtools.Installation
    runs: list[tuple[str, Any]] = field(default_factory=list)
    gate: anyio.Event | None = None

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.runs if name == tool)


class SubjectToken(AccessToken):
    """mcp < 1.30 has no `subject`/`claims` on `AccessToken`: a verifier there adds them
    (idemtools never scopes by the client id in their place)."""

    subject: str | None = None
    claims: dict[str, Any] | None = None


class Verifier:
    """A token verifier: `tok-<who>` is a valid token of subject `user-<who>`, client
    `client-<who>`."""

    async def verify_token(self, token: str) -> Any:
        if not token.startswith("tok-"):
            return None
        who = token[4:]
        return SubjectToken(
            token=token,
            client_id=f"client-{who}",
            scopes=["mcp"],
            subject=f"user-{who}",
            claims={"iss": "https://issuer.test"},
        )


def make_app(
    store: Store | None = None,
    *,
    auth: bool = False,
    stateless: bool = False,
    **install_options: Any,
) -> App:
    """The test server: every SEP outcome can be produced with its tools."""
    kwargs: dict[str, Any] = {}
    if auth:
        settings: dict[str, Any] = {
            "issuer_url": "https://issuer.test",
            "resource_server_url": None,
            "required_scopes": ["mcp"],
        }
        if "validate_token_resource" in AuthSettings.model_fields:
            settings["validate_token_resource"] = False
        kwargs.update(token_verifier=Verifier(), auth=AuthSettings(**settings))
    if not SDK2:
        kwargs.update(stateless_http=stateless, json_response=stateless)
    server = _Server("test-server", **kwargs)
    app = App(server=server, installation=None)  # type: ignore[arg-type]
    registry = idemtools.Registry()

    @server.tool()
    @idempotent(registry=registry)
    async def charge(amount: int, currency: str = "usd") -> str:
        app.runs.append(("charge", amount))
        return f"charged {amount} {currency} #{app.count('charge')}"

    @server.tool()
    @idempotent(registry=registry, lease=5)
    async def slow(seconds: float = 0.5) -> str:
        app.runs.append(("slow", seconds))
        if app.gate is not None:
            await app.gate.wait()
        else:
            await anyio.sleep(seconds)
        return f"slow done #{app.count('slow')}"

    @server.tool()
    @idempotent(registry=registry)
    async def fails(reason: str) -> str:
        app.runs.append(("fails", reason))
        raise ValueError(f"refused: {reason}")

    @server.tool()
    @idempotent(registry=registry)
    async def report(n: int) -> dict[str, int]:
        app.runs.append(("report", n))
        return {"n": n, "double": 2 * n}

    @server.tool()
    @idempotent(registry=registry, scope=shared)
    async def echo(value: Any) -> str:
        app.runs.append(("echo", value))
        return json.dumps(value, sort_keys=True)

    @server.tool()
    async def plain(x: int) -> str:
        """No @idempotent: keyed calls get the server's default policy."""
        app.runs.append(("plain", x))
        return f"plain {x} #{app.count('plain')}"

    app.installation = idemtools.install(server, store=store, registry=registry, **install_options)
    return app


def lowlevel_of(server: Any) -> Any:
    return sdk_lowlevel_of(server) or server


# -- in-memory raw wire (the SDK's stream loop, 2025-11-25 handshake) ---------------------------


class MemoryWire:
    """Raw JSON-RPC over the SDK's in-memory streams, answered by `server.run`."""

    def __init__(self, read: Any, write: Any) -> None:
        self._read, self._write = read, write
        self._ids = itertools.count(1)
        self.initialize: dict[str, Any] = {}
        self._pending: dict[Any, dict[str, Any]] = {}
        self._arrived: dict[Any, anyio.Event] = {}
        self._answers: dict[Any, list[dict[str, Any]]] = {}

    async def send(self, message: dict[str, Any]) -> None:
        cls = types.JSONRPCRequest if "id" in message else types.JSONRPCNotification
        parsed: Any = cls.model_validate(message)
        if not SDK2:
            parsed = types.JSONRPCMessage(parsed)
        await self._write.send(SessionMessage(parsed))

    async def pump(self) -> None:
        """The one reader: hands each reply to whoever waits for its id."""
        async for msg in self._read:
            if isinstance(msg, Exception):
                raise msg
            data = msg.message.model_dump(by_alias=True, exclude_none=True, mode="json")
            data = data.get("root", data) if LINE == 1 and "root" in data else data
            if "id" in data and ("result" in data or "error" in data):
                self._pending[data["id"]] = data
                self._answers.setdefault(data["id"], []).append(data)
                self._arrived.setdefault(data["id"], anyio.Event()).set()

    def answers(self, rid: Any) -> list[dict[str, Any]]:
        """Every reply to `rid` that arrived, in order (one at most, for any well-behaved id)."""
        return self._answers.get(rid, [])

    async def _receive(self, rid: Any) -> dict[str, Any]:
        await self._arrived.setdefault(rid, anyio.Event()).wait()
        del self._arrived[rid]
        return self._pending.pop(rid)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid = next(self._ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self._receive(rid)

    async def call(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", params)


@contextlib.asynccontextmanager
async def memory_wire(app: App) -> AsyncIterator[MemoryWire]:
    lowlevel = lowlevel_of(app.server)
    # A raw stream pair is no transport idemtools can recognise: declare it local (the tests'
    # by_auth_subject tools then scope by the local user, as over stdio).
    with idemtools.local_transport("memory"):
        async with _memory_wire(app, lowlevel) as wire:
            yield wire


@contextlib.asynccontextmanager
async def _memory_wire(app: App, lowlevel: Any) -> AsyncIterator[MemoryWire]:
    async with (
        create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
        anyio.create_task_group() as tg,
    ):
        options = lowlevel.create_initialization_options()
        tg.start_soon(lambda: lowlevel.run(s_read, s_write, options))
        wire = MemoryWire(c_read, c_write)
        tg.start_soon(wire.pump)
        init = await wire.request(
            "initialize",
            {
                "protocolVersion": LEGACY if LINE == 2 else types.LATEST_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        wire.initialize = init["result"]
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        try:
            yield wire
        finally:
            tg.cancel_scope.cancel()


# -- streamable HTTP raw wire -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def serve_http(app: App, *, stateless: bool) -> Iterator[str]:
    """Run the app's streamable HTTP endpoint with uvicorn on 127.0.0.1; yield its URL."""
    if SDK2:
        asgi = app.server.streamable_http_app(stateless_http=stateless, json_response=stateless)
    else:
        asgi = app.server.streamable_http_app()
    with serve_asgi(asgi, "/mcp") as url:
        yield url


@contextlib.contextmanager
def serve_asgi(
    asgi: Any, path: str, lifespan: Literal["auto", "on", "off"] = "on"
) -> Iterator[str]:
    """Any ASGI app under uvicorn on a free 127.0.0.1 port, in a thread; yields base URL + path."""
    import uvicorn

    port = _free_port()
    config = uvicorn.Config(asgi, host="127.0.0.1", port=port, log_level="error", lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        server.should_exit = True
        thread.join(10)


def _body(response: httpx.Response) -> dict[str, Any]:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            json.loads(line[5:])
            for line in response.text.splitlines()
            if line.startswith("data:") and line[5:].strip()
        ]
        replies = [e for e in events if "result" in e or "error" in e]
        return replies[-1] if replies else {}
    parsed: dict[str, Any] = response.json() if response.content else {}
    return parsed


class HttpWire:
    """Raw JSON-RPC POSTs to a streamable HTTP endpoint, in one protocol era."""

    def __init__(self, client: httpx.AsyncClient, url: str, era: str, token: str | None) -> None:
        self.client, self.url, self.era = client, url, era
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self._ids = itertools.count(1)
        self.initialize: dict[str, Any] = {}
        self.last_status = 0

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = dict(self.headers)
        body_params = dict(params or {})
        if self.era == MODERN:
            headers.update({"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
            if method == "tools/call" and isinstance(body_params.get("name"), str):
                headers["Mcp-Name"] = body_params["name"]
            body_params["_meta"] = {**MODERN_META, **body_params.get("_meta", {})}
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None or self.era == MODERN:
            message["params"] = body_params
        response = await self.client.post(self.url, headers=headers, json=message)
        self.last_status = response.status_code
        return _body(response)

    async def call(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", params)

    async def open(self) -> None:
        if self.era == MODERN:
            self.initialize = (await self.request("server/discover"))["result"]
            return
        response = await self.client.post(
            self.url,
            headers=self.headers,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY if LINE == 2 else types.LATEST_PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                },
            },
        )
        self.last_status = response.status_code
        self.initialize = _body(response).get("result", {})
        session = response.headers.get("mcp-session-id")
        version = self.initialize.get("protocolVersion")
        if session:
            self.headers["Mcp-Session-Id"] = session
        if version:
            self.headers["MCP-Protocol-Version"] = version
        await self.client.post(
            self.url,
            headers=self.headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )


@contextlib.asynccontextmanager
async def http_wire(
    url: str, era: str = LEGACY, token: str | None = None
) -> AsyncIterator[HttpWire]:
    async with httpx.AsyncClient(timeout=30) as client:
        wire = HttpWire(client, url, era, token)
        await wire.open()
        yield wire


def error_type(reply: dict[str, Any]) -> str | None:
    data = reply.get("error", {}).get("data")
    return data.get("type") if isinstance(data, dict) else None


def result_text(reply: dict[str, Any]) -> str:
    content = reply.get("result", {}).get("content", [])
    return " ".join(block.get("text", "") for block in content)
