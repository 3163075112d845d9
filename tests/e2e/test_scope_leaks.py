"""Scopes over real transports: one caller never receives another's recorded answer, and a
replay never bypasses authorization.

Every test has a second caller reuse the first caller's key (keys are not secrets) and checks
two things: the second caller never receives the first's answer, and the tool ran at most once
per real caller. Token verifiers are written like a deployment's: an introspection table that
maps opaque tokens to what the authorization server said about them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest

import idemtools
import idemtools.stores
from idemtools import by_client_id, idempotent, per_session
from idemtools.client import NO_RETRY, call_tool
from idemtools.errors import ScopeUnavailableError
from idemtools.server.adapters import SDK2

from .harness import (
    ERAS,
    LINE,
    MODERN,
    AuthSettings,
    HttpWire,
    SubjectToken,
    _Server,
    error_type,
    http_wire,
    result_text,
    serve_asgi,
)

MODES = [(stateless, era) for stateless in (False, True) for era in ERAS]
MODE_IDS = [f"{'stateless' if s else 'stateful'}-{e}" for s, e in MODES]
ISSUER = "https://login.example"


@dataclass
class Introspection:
    """A token verifier backed by an introspection table (RFC 7662 responses by token).

    `with_subject=False` is a verifier that maps only the client and its scopes, as the SDK's
    own examples did before 1.30: the case `by_auth_subject` must refuse.
    """

    table: dict[str, dict[str, Any]]
    with_subject: bool = True

    async def verify_token(self, token: str) -> Any:
        row = self.table.get(token)
        if row is None:
            return None
        extra: dict[str, Any] = {}
        if self.with_subject:
            extra = {"subject": row["sub"], "claims": {"iss": row["iss"]} if "iss" in row else {}}
        return SubjectToken(
            token=token, client_id=row["client_id"], scopes=row["scope"].split(), **extra
        )


TABLE: dict[str, dict[str, Any]] = {
    "opaque-alice": {"client_id": "app-1", "sub": "alice", "iss": ISSUER, "scope": "mcp balance"},
    "opaque-bob": {"client_id": "app-1", "sub": "bob", "iss": ISSUER, "scope": "mcp balance"},
    "opaque-alice-revoked": {"client_id": "app-1", "sub": "alice", "iss": ISSUER, "scope": "mcp"},
    "opaque-alice-as2": {
        "client_id": "app-1",
        "sub": "alice",
        "iss": "https://partner-login.example",
        "scope": "mcp balance",
    },
    "opaque-carol-app2": {"client_id": "app-2", "sub": "carol", "iss": ISSUER, "scope": "mcp"},
}


@dataclass
class Leaky:
    server: Any
    installation: idemtools.Installation
    runs: list[tuple[str, Any]] = field(default_factory=list)

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.runs if name == tool)


def _in_handler_scopes() -> list[str]:
    from mcp.server.auth.middleware.auth_context import get_access_token

    token = get_access_token()
    return list(token.scopes) if token is not None else []


def build(
    verifier: Any = None,
    *,
    stateless: bool = False,
    issuer: str = ISSUER,
    middleware: Any = None,
    **install: Any,
) -> Leaky:
    kwargs: dict[str, Any] = {}
    if verifier is not None:
        settings: dict[str, Any] = {
            "issuer_url": issuer,
            "resource_server_url": None,
            "required_scopes": ["mcp"],
        }
        if "validate_token_resource" in AuthSettings.model_fields:
            settings["validate_token_resource"] = False
        kwargs.update(token_verifier=verifier, auth=AuthSettings(**settings))
    if LINE == 1:
        kwargs.update(stateless_http=stateless, json_response=stateless)
    server = _Server("leaks", **kwargs)
    app = Leaky(server=server, installation=None)  # type: ignore[arg-type]
    registry = idemtools.Registry()

    @server.tool()
    @idempotent(registry=registry)
    async def charge(amount: int) -> str:
        app.runs.append(("charge", amount))
        return f"charged {amount} #{app.count('charge')}"

    @server.tool()
    @idempotent(registry=registry, scope=by_client_id)
    async def app_charge(amount: int) -> str:
        app.runs.append(("app_charge", amount))
        return f"app charged {amount} #{app.count('app_charge')}"

    @server.tool()
    @idempotent(registry=registry, scope=per_session)
    async def note(text: str) -> str:
        app.runs.append(("note", text))
        return f"noted {text} #{app.count('note')}"

    def needs_balance(context: idemtools.CallContext) -> None:
        if context.auth is None or "balance" not in context.auth.scopes:
            raise PermissionError("balance scope missing for " + str(context.auth))

    @server.tool()
    @idempotent(registry=registry, authorize=needs_balance)
    async def balance() -> str:
        # The tool's own check, as a real one would make it; idemtools cannot see it, so the
        # tool declares the same check as `authorize=` above.
        if "balance" not in _in_handler_scopes():
            raise PermissionError("not allowed")
        app.runs.append(("balance", None))
        return f"balance 4200 #{app.count('balance')}"

    if middleware is not None:  # a user's middleware added before install()
        server._lowlevel_server.middleware.append(middleware)  # type: ignore[attr-defined]  # 2.x
    app.installation = idemtools.install(server, registry=registry, **install)
    return app


def serve_streamable(app: Leaky, stateless: bool) -> contextlib.AbstractContextManager[str]:
    if LINE == 2:
        asgi = app.server.streamable_http_app(stateless_http=stateless, json_response=stateless)
    else:
        asgi = app.server.streamable_http_app()
    return serve_asgi(asgi, "/mcp")


def keyed(name: str, key: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "idempotencyKey": key}


# -- 1. two users of one client app, verifier without subjects ---------------------------------


@pytest.mark.parametrize(("stateless", "era"), MODES, ids=MODE_IDS)
async def test_two_users_of_one_client_app_without_subjects(stateless: bool, era: str) -> None:
    app = build(Introspection(TABLE, with_subject=False), stateless=stateless)
    with serve_streamable(app, stateless) as url:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(http_wire(url, era, token="opaque-alice"))
            bob = await stack.enter_async_context(http_wire(url, era, token="opaque-bob"))
            a1 = await alice.call(keyed("charge", "k-1", amount=1))
            b1 = await bob.call(keyed("charge", "k-1", amount=1))
            # the operator's explicit opt-in: one scope per OAuth client (app-1 vs app-2)
            c1 = await alice.call(keyed("app_charge", "k-2", amount=5))
            c2 = await alice.call(keyed("app_charge", "k-2", amount=5))
    for reply in (a1, b1):
        assert error_type(reply) == "idempotency_scope_unavailable"
        assert "no subject" in reply["error"]["message"]
        assert "by_client_id" in reply["error"]["message"]
    assert app.count("charge") == 0  # never ran under a pooled, per-app scope
    assert result_text(c1) == "app charged 5 #1" and c2["result"] == c1["result"]
    assert app.count("app_charge") == 1


@pytest.mark.parametrize(("stateless", "era"), MODES, ids=MODE_IDS)
async def test_same_subject_from_two_issuers(stateless: bool, era: str) -> None:
    app = build(Introspection(TABLE), stateless=stateless)
    with serve_streamable(app, stateless) as url:
        async with AsyncExitStack() as stack:
            home = await stack.enter_async_context(http_wire(url, era, token="opaque-alice"))
            partner = await stack.enter_async_context(http_wire(url, era, token="opaque-alice-as2"))
            h1 = await home.call(keyed("charge", "k-iss", amount=1))
            p1 = await partner.call(keyed("charge", "k-iss", amount=1))
            h2 = await home.call(keyed("charge", "k-iss", amount=1))
            p2 = await partner.call(keyed("charge", "k-iss", amount=1))
    assert result_text(h1) == "charged 1 #1" and result_text(p1) == "charged 1 #2"
    assert h2["result"] == h1["result"] and p2["result"] == p1["result"]
    assert app.count("charge") == 2


async def test_issuer_falls_back_to_the_servers_issuer_url() -> None:
    # Two servers of two authorization servers, one shared store, verifiers that put no `iss`
    # claim on the token: the configured issuer_url still keeps the same `sub` apart.
    store = idemtools.stores.MemoryStore()
    no_iss = {k: {kk: vv for kk, vv in v.items() if kk != "iss"} for k, v in TABLE.items()}
    first = build(Introspection(no_iss), stateless=True, store=store)
    second = build(
        Introspection(no_iss), stateless=True, issuer="https://partner-login.example", store=store
    )
    era = ERAS[0]
    with serve_streamable(first, True) as url1, serve_streamable(second, True) as url2:
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(http_wire(url1, era, token="opaque-alice"))
            two = await stack.enter_async_context(http_wire(url2, era, token="opaque-alice"))
            r1 = await one.call(keyed("charge", "k-fallback", amount=3))
            r2 = await two.call(keyed("charge", "k-fallback", amount=3))
    assert result_text(r1) == "charged 3 #1" and result_text(r2) == "charged 3 #1"
    assert first.count("charge") == 1 and second.count("charge") == 1


# -- 3. per_session: the SDK's session, never the Mcp-Session-Id header -------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_forged_session_header_on_stateless_http(era: str) -> None:
    app = build(Introspection(TABLE), stateless=True)
    with serve_streamable(app, True) as url:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(http_wire(url, era, token="opaque-alice"))
            bob = await stack.enter_async_context(http_wire(url, era, token="opaque-bob"))
            for wire in (alice, bob):
                wire.headers["Mcp-Session-Id"] = "chosen-by-the-client"
            a1 = await alice.call(keyed("note", "k-note", text="alice's secret"))
            b1 = await bob.call(keyed("note", "k-note", text="alice's secret"))
    for reply in (a1, b1):
        assert error_type(reply) == "idempotency_scope_unavailable", reply
        assert "alice's secret" not in json.dumps(reply)
    assert app.count("note") == 0


@pytest.mark.parametrize("era", [e for e in ERAS if e != MODERN])
async def test_per_session_on_stateful_http_is_the_sdks_session(era: str) -> None:
    app = build(Introspection(TABLE), stateless=False)
    with serve_streamable(app, False) as url:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(http_wire(url, era, token="opaque-alice"))
            bob = await stack.enter_async_context(http_wire(url, era, token="opaque-bob"))
            a1 = await alice.call(keyed("note", "k-note", text="a"))
            b1 = await bob.call(keyed("note", "k-note", text="a"))
            a2 = await alice.call(keyed("note", "k-note", text="a"))
            # Bob presents Alice's session id: the SDK refuses a session of another
            # principal (mcp >= 1.30, 2.x) or, on older releases, routes him to that session;
            # either way he never gets Alice's answer under his own token's session.
            bob.headers["Mcp-Session-Id"] = alice.headers["Mcp-Session-Id"]
            forged = await bob.call(keyed("note", "k-note", text="a"))
            forged_status = bob.last_status
    assert result_text(a1) == "noted a #1" and result_text(b1) == "noted a #2"
    assert a2["result"] == a1["result"]
    if forged_status == 200 and "result" in forged:
        # mcp 1.21-1.29 bind no session to its principal and route Bob into Alice's session;
        # the per-session scope also names the request's caller, so Bob's call is his own.
        assert LINE == 1
        assert result_text(forged) == "noted a #3", forged
        assert app.count("note") == 3
    else:
        assert forged_status in (400, 403, 404) or "error" in forged
        assert app.count("note") == 2


@contextlib.asynccontextmanager
async def sse_session(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    async with (
        sse_client(url, headers=headers) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def _text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_forged_session_header_on_sse() -> None:
    app = build()
    asgi = app.server.sse_app()
    with serve_asgi(asgi, "/sse") as url:
        forged = {"Mcp-Session-Id": "chosen-by-the-client"}
        async with sse_session(url, forged) as alice, sse_session(url, forged) as mallory:
            a1 = await call_tool(alice, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY)
            m1 = await call_tool(
                mallory, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY
            )
            a2 = await call_tool(alice, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY)
    # the real session (in the SSE query string, held by the SDK) is the scope; the header is
    # ignored: Mallory's call runs in her own session and never sees Alice's answer
    assert _text(a1) == "noted a #1" and _text(m1) == "noted a #2"
    assert _text(a2) == "noted a #1"
    assert app.count("note") == 2


# -- 2. mcp 1.x WebSocket: an unknown transport, never the local user's scope ------------------


@pytest.mark.skipif(LINE != 1, reason="the WebSocket transport exists on mcp 1.x only")
@pytest.mark.filterwarnings("ignore:The WebSocket .*transport is deprecated:DeprecationWarning")
async def test_websocket_clients_never_share_the_local_users_scope() -> None:
    from mcp import ClientSession

    # mcp 1.x only (the test is skipped on 2.x, which has no WebSocket transport)
    from mcp.client.websocket import websocket_client  # type: ignore[import-not-found]
    from mcp.server.websocket import websocket_server  # type: ignore[import-not-found]

    app = build()
    lowlevel = app.server._mcp_server

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        async with websocket_server(scope, receive, send) as (read, write):
            await lowlevel.run(read, write, lowlevel.create_initialization_options())

    @contextlib.asynccontextmanager
    async def ws(url: str) -> AsyncIterator[Any]:
        async with (
            websocket_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session

    with serve_asgi(asgi, "/ws", lifespan="off") as url:
        url = url.replace("http://", "ws://")
        async with ws(url) as alice, ws(url) as mallory:
            refused = []
            for session in (alice, mallory):
                with pytest.raises(ScopeUnavailableError) as exc:
                    await call_tool(
                        session, "charge", {"amount": 1}, idempotency_key="k", retry=NO_RETRY
                    )
                refused.append(exc.value)
            a1 = await call_tool(alice, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY)
            m1 = await call_tool(
                mallory, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY
            )
            a2 = await call_tool(alice, "note", {"text": "a"}, idempotency_key="k", retry=NO_RETRY)
    assert all("transport" in str(e) for e in refused)
    assert app.count("charge") == 0
    # the operator's choice that works there: per_session, one WebSocket connection each
    assert _text(a1) == "noted a #1" and _text(m1) == "noted a #2" and _text(a2) == "noted a #1"


# -- local transports, positively identified ----------------------------------------------------


@pytest.mark.parametrize("declared", [False, True], ids=["undeclared", "declared"])
async def test_a_raw_stream_pair_is_local_only_when_declared(declared: bool) -> None:
    from mcp.shared.memory import create_client_server_memory_streams

    from .harness import MemoryWire

    app = build()
    lowlevel = getattr(app.server, "_lowlevel_server", None) or app.server._mcp_server
    async with (
        create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
        anyio.create_task_group() as tg,
    ):
        options = lowlevel.create_initialization_options()
        # declared around server.run() only: the client's sends below are outside the block
        with idemtools.local_transport("memory") if declared else contextlib.nullcontext():
            tg.start_soon(lambda: lowlevel.run(s_read, s_write, options))
        wire = MemoryWire(c_read, c_write)
        tg.start_soon(wire.pump)
        await wire.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        reply = await wire.call(keyed("charge", "k", amount=1))
        again = await wire.call(keyed("charge", "k", amount=1))
        session = await wire.call(keyed("note", "k", text="a"))
        tg.cancel_scope.cancel()
    if declared:
        assert result_text(reply) == "charged 1 #1" and again["result"] == reply["result"]
        assert app.count("charge") == 1
    else:
        assert error_type(reply) == "idempotency_scope_unavailable"
        assert app.count("charge") == 0
    assert result_text(session) == "noted a #1"  # a session works on any transport with one


async def test_the_sdks_in_memory_client_is_local() -> None:
    app = build()
    if SDK2:
        from mcp.client.client import Client

        for mode in ("legacy", "auto"):  # stream loop, and the in-process dispatcher
            async with Client(app.server, mode=mode) as client:
                r1 = await call_tool(client, "charge", {"amount": 2}, idempotency_key="k")
                r2 = await call_tool(client, "charge", {"amount": 2}, idempotency_key="k")
    else:
        from mcp.shared.memory import create_connected_server_and_client_session

        async with create_connected_server_and_client_session(app.server._mcp_server) as client:
            r1 = await call_tool(client, "charge", {"amount": 2}, idempotency_key="k")
            r2 = await call_tool(client, "charge", {"amount": 2}, idempotency_key="k")
    assert _text(r1) == "charged 2 #1" and _text(r2) == "charged 2 #1"
    assert app.count("charge") == 1


# -- 4. a revoked permission, replayed with the old key -----------------------------------------


@pytest.mark.parametrize(("stateless", "era"), MODES, ids=MODE_IDS)
async def test_revoked_permission_replay(stateless: bool, era: str) -> None:
    app = build(Introspection(TABLE), stateless=stateless)
    with serve_streamable(app, stateless) as url:
        async with http_wire(url, era, token="opaque-alice") as before:
            first = await before.call(keyed("balance", "k-bal"))
        async with http_wire(url, era, token="opaque-alice-revoked") as after:
            fresh = await after.call({"name": "balance", "arguments": {}})
            replay = await after.call(keyed("balance", "k-bal"))
            other = await after.call(keyed("balance", "k-bal-2"))
    assert result_text(first) == "balance 4200 #1"
    assert fresh.get("result", {}).get("isError") is True  # the tool's own refusal
    for reply in (replay, other):
        assert error_type(reply) == "idempotency_unauthorized", reply
        assert "4200" not in json.dumps(reply)
        assert "balance scope missing" not in json.dumps(reply)  # the reason stays server-side
    assert app.count("balance") == 1


async def test_server_wide_authorize_on_install() -> None:
    def no_bob(context: idemtools.CallContext) -> None:
        if context.auth is not None and context.auth.subject == "bob":
            raise PermissionError("bob is suspended")

    app = build(Introspection(TABLE), stateless=True, authorize=no_bob)
    era = ERAS[0]
    with serve_streamable(app, True) as url:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(http_wire(url, era, token="opaque-alice"))
            bob = await stack.enter_async_context(http_wire(url, era, token="opaque-bob"))
            a1 = await alice.call(keyed("charge", "k", amount=1))
            b1 = await bob.call(keyed("charge", "k", amount=1))
    assert result_text(a1) == "charged 1 #1"
    assert error_type(b1) == "idempotency_unauthorized"
    assert app.count("charge") == 1


# -- 5. mcp 2.x middleware order: replays pass through every user middleware -------------------


class RequireBalanceScope:
    """A user's authorization middleware, as a deployment writes one: `charge` needs the
    `balance` scope on the current request's token."""

    def __init__(self) -> None:
        self.seen = 0

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call" and (ctx.params or {}).get("name") == "charge":
            self.seen += 1
            user = ctx.request.scope.get("user") if ctx.request is not None else None
            token = getattr(user, "access_token", None)
            if token is None or "balance" not in token.scopes:
                from mcp.shared.exceptions import MCPError  # type: ignore[attr-defined]  # 2.x only

                raise MCPError(-32003, "forbidden by policy")
        return await call_next(ctx)


ORDERS = ["before-install", "after-install", "replaced-list"]
ORDER_MODES = [(o, s, e) for o in ORDERS for s, e in MODES] if LINE == 2 else []


@pytest.mark.skipif(LINE != 2, reason="the server middleware chain exists on mcp 2.x only")
@pytest.mark.parametrize(
    ("order", "stateless", "era"),
    ORDER_MODES,
    ids=[f"{o}-{'stateless' if s else 'stateful'}-{e}" for o, s, e in ORDER_MODES],
)
async def test_replays_pass_through_user_middleware_in_any_order(
    order: str, stateless: bool, era: str
) -> None:
    guard = RequireBalanceScope()
    app = build(
        Introspection(TABLE),
        stateless=stateless,
        middleware=guard if order == "before-install" else None,
    )
    lowlevel = app.server._lowlevel_server
    if order == "after-install":
        lowlevel.middleware.append(guard)
    elif order == "replaced-list":  # wholesale: the one order idemtools cannot intercept
        lowlevel.middleware = [*lowlevel.middleware, guard]
    with serve_streamable(app, stateless) as url:
        if order == "replaced-list" and era == MODERN:
            # No handshake or discover put the chain right first: the keyed call is refused
            # (fail closed, nothing runs) and idemtools is innermost again for the next one.
            # On the 2025-11-25 era, `initialize` (or `server/discover`) does this at start-up.
            async with httpx.AsyncClient(timeout=30) as raw:
                cold = await HttpWire(raw, url, era, "opaque-alice").call(
                    keyed("charge", "k-mw", amount=7)
                )
            assert "innermost" in cold["error"]["message"], cold
            assert app.count("charge") == 0
        async with http_wire(url, era, token="opaque-alice") as before:
            first = await before.call(keyed("charge", "k-mw", amount=7))
            again = await before.call(keyed("charge", "k-mw", amount=7))
        async with http_wire(url, era, token="opaque-alice-revoked") as after:
            replay = await after.call(keyed("charge", "k-mw", amount=7))
    assert result_text(first) == "charged 7 #1" and again["result"] == first["result"]
    assert replay.get("error", {}).get("message") == "forbidden by policy", replay
    assert "charged" not in json.dumps(replay)
    assert app.count("charge") == 1
    assert lowlevel.middleware[-1] is not guard  # idemtools sits innermost
    assert guard in lowlevel.middleware


@pytest.mark.skipif(LINE != 2, reason="the server middleware chain exists on mcp 2.x only")
def test_idemtools_stays_innermost_whatever_the_list_operation() -> None:
    app = build()
    chain = app.server._lowlevel_server.middleware
    ours = chain[-1]
    a, b, c, d = object(), object(), object(), object()
    chain.append(a)
    chain.insert(len(chain), b)
    chain.extend([c])
    chain += [d]
    assert chain[-1] is ours and all(m in chain for m in (a, b, c, d))
    chain.reverse()
    assert chain[-1] is ours
    chain[0] = object()
    assert chain[-1] is ours


# -- 7. one key on tools with different scope strategies ----------------------------------------


async def test_one_key_on_tools_of_the_same_and_of_other_scopes() -> None:
    from .harness import make_app, memory_wire

    app = make_app()
    async with memory_wire(app) as wire:
        charged = await wire.call(keyed("charge", "k-7", amount=1))  # by_auth_subject
        same_scope = await wire.call(keyed("report", "k-7", n=1))  # by_auth_subject too
        other_scope = await wire.call(keyed("echo", "k-7", value=1))  # shared
        echo_again = await wire.call(keyed("echo", "k-7", value=1))
    assert result_text(charged).startswith("charged 1")
    assert error_type(same_scope) == "idempotency_key_conflict"
    assert app.count("report") == 0
    assert "result" in other_scope and echo_again["result"] == other_scope["result"]
    assert app.count("echo") == 1 and app.count("charge") == 1
