"""FastMCP's own authorization runs on replays exactly as on executions.

Alice executes `invoice` with a token that grants `billing`; her token is re-issued without
it; her retry with the old key must be refused by FastMCP exactly as a fresh call with a new
key is (the same answer), never answered from the record. Over FastMCP's own HTTP app with
JWT bearer auth, in both protocol eras, for `AuthMiddleware`, a tool's `auth=`, a custom
middleware, a mounted server's middleware and a middleware added after `install()`.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from fastmcp import FastMCP  # noqa: E402
from fastmcp.server.auth import require_scopes  # noqa: E402
from fastmcp.server.auth.providers.jwt import JWTVerifier, RSAKeyPair  # noqa: E402
from fastmcp.server.dependencies import get_access_token  # noqa: E402
from fastmcp.server.middleware import Middleware  # noqa: E402
from fastmcp.server.middleware.authorization import AuthMiddleware  # noqa: E402

import idemtools  # noqa: E402
from idemtools import InstallError, by_auth_subject, idempotent  # noqa: E402
from tests.e2e.harness import LEGACY, MODERN, http_wire, result_text, serve_asgi  # noqa: E402

SHAPES = [(False, LEGACY), (True, LEGACY), (True, MODERN)]  # (stateless, era)
SHAPE_IDS = ["stateful-2025-11-25", "stateless-2025-11-25", "stateless-2026-07-28"]
ISSUER, AUDIENCE = "https://auth.example", "idemtools"
KEYS = RSAKeyPair.generate()


def token(*scopes: str) -> str:
    return KEYS.create_token(subject="alice", issuer=ISSUER, audience=AUDIENCE, scopes=list(scopes))


class RequireBilling(Middleware):  # type: ignore[misc]  # Any without fastmcp
    """A deployment's own authorization middleware: `invoice` needs the `billing` scope."""

    def __init__(self) -> None:
        self.seen = 0

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        self.seen += 1
        access = get_access_token()
        if access is None or "billing" not in access.scopes:
            from fastmcp.exceptions import ToolError

            raise ToolError("billing scope required by policy")
        return await call_next(context)


class Built:
    def __init__(self, server: Any, installation: idemtools.Installation, runs: list[int]):
        self.server, self.installation, self.runs = server, installation, runs


def build(guard: str, **install_options: Any) -> Built:
    """A FastMCP server whose `invoice` tool is guarded by `guard`, then `install()`."""
    runs: list[int] = []
    server: Any = FastMCP(
        "billing", auth=JWTVerifier(public_key=KEYS.public_key, issuer=ISSUER, audience=AUDIENCE)
    )
    home = server
    if guard == "mounted":
        home = FastMCP("child")
        home.add_middleware(RequireBilling())
    if guard == "auth-middleware":
        server.add_middleware(AuthMiddleware(auth=require_scopes("billing")))
    if guard == "custom":
        server.add_middleware(RequireBilling())
    tool_auth = require_scopes("billing") if guard == "tool-auth" else None

    @home.tool(name="invoice", auth=tool_auth)
    @idempotent(scope=by_auth_subject)
    def invoice(amount: int) -> str:
        runs.append(amount)
        return f"invoice #{len(runs)} for {amount}"

    if guard == "mounted":
        server.mount(home, namespace="acct")
    installation = idemtools.install(server, **install_options)
    if guard == "after-install":
        server.add_middleware(RequireBilling())
    return Built(server, installation, runs)


def name_of(guard: str) -> str:
    return "acct_invoice" if guard == "mounted" else "invoice"


@contextlib.contextmanager
def serve(built: Built, *, stateless: bool) -> Iterator[str]:
    asgi = built.server.http_app(path="/mcp", stateless_http=stateless, json_response=stateless)
    with serve_asgi(asgi, "/mcp") as url:
        yield url


def answer(reply: dict[str, Any]) -> Any:
    """What a client sees, without the JSON-RPC id."""
    return reply.get("error") or reply.get("result")


GUARDS = ["auth-middleware", "tool-auth", "custom", "mounted", "after-install"]


@pytest.mark.parametrize("guard", GUARDS)
@pytest.mark.parametrize(("stateless", "era"), SHAPES, ids=SHAPE_IDS)
async def test_a_retry_after_the_scope_was_revoked_is_refused_like_a_fresh_call(
    guard: str, stateless: bool, era: str
) -> None:
    built = build(guard)
    tool = name_of(guard)

    def call(key: str) -> dict[str, Any]:
        return {"name": tool, "arguments": {"amount": 42}, "idempotencyKey": key}

    with serve(built, stateless=stateless) as url:
        async with http_wire(url, era, token("billing")) as before:
            first = await before.call(call("inv-1"))
            assert result_text(first) == "invoice #1 for 42", first
            assert answer(await before.call(call("inv-1"))) == answer(first)  # replayed
        async with http_wire(url, era, token()) as after:  # re-issued without `billing`
            fresh = await after.call(call("inv-2"))
            retry = await after.call(call("inv-1"))
    assert "invoice #" not in json.dumps(fresh), fresh
    assert "invoice #" not in json.dumps(retry), retry
    assert answer(retry) == answer(fresh)  # refused by FastMCP exactly as a fresh call
    assert built.runs == [42]
    stats = built.installation.engine.stats
    assert (stats.executions, stats.replays) == (1, 1)


async def test_a_middleware_refusing_on_the_way_out_refuses_the_replay_too() -> None:
    # A check made after the tool ran (on its result) also applies to a replay.
    built = build("none")
    allowed = {"yes": True}

    class RefuseAfter(Middleware):  # type: ignore[misc]
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            result = await call_next(context)
            if not allowed["yes"]:
                from fastmcp.exceptions import ToolError

                raise ToolError("result withheld by policy")
            return result

    built.server.add_middleware(RefuseAfter())
    call = {"name": "invoice", "arguments": {"amount": 5}, "idempotencyKey": "out-1"}
    with serve(built, stateless=True) as url:
        async with http_wire(url, MODERN, token("billing")) as alice:
            assert result_text(await alice.call(call)) == "invoice #1 for 5"
            allowed["yes"] = False
            retry = await alice.call(call)
    assert "invoice #" not in json.dumps(retry), retry
    assert "result withheld by policy" in json.dumps(retry)
    assert built.runs == [5]


async def test_middleware_that_calls_on_twice_never_runs_a_keyed_tool_twice() -> None:
    # A retrying middleware (FastMCP's RetryMiddleware re-runs failed calls) reaches the tool
    # once per keyed call; a second call is refused, not executed.
    built = build("none")

    class Twice(Middleware):  # type: ignore[misc]
        async def on_call_tool(self, context: Any, call_next: Any) -> Any:
            await call_next(context)
            return await call_next(context)

    built.server.add_middleware(Twice())
    call = {"name": "invoice", "arguments": {"amount": 3}, "idempotencyKey": "twice-1"}
    with serve(built, stateless=True) as url:
        async with http_wire(url, LEGACY, token("billing")) as alice:
            first = await alice.call(call)
            again = await alice.call(call)
    assert built.runs == [3]
    assert answer(again) == answer(first)


async def test_unkeyed_and_nested_tool_calls_are_untouched() -> None:
    # A tool that calls another tool of its server (a keyed call's execution) runs it once.
    built = build("custom")

    @built.server.tool
    async def wrapper(amount: int) -> str:
        inner = await built.server.call_tool("invoice", {"amount": amount})
        return "wrapped " + inner.content[0].text

    with serve(built, stateless=True) as url:
        async with http_wire(url, LEGACY, token("billing")) as alice:
            keyed = await alice.call(
                {"name": "wrapper", "arguments": {"amount": 1}, "idempotencyKey": "w-1"}
            )
            unkeyed = await alice.call({"name": "invoice", "arguments": {"amount": 2}})
    assert result_text(keyed) == "wrapped invoice #1 for 1", keyed
    assert result_text(unkeyed) == "invoice #2 for 2", unkeyed


def test_skip_middleware_is_an_explicit_opt_out_logged_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="idemtools"):
        built = build("custom", replay_authorization="skip_middleware")
    assert built.installation.adapter == "fastmcp"
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("skip_middleware" in r.getMessage() for r in warned), warned
    with pytest.raises(ValueError, match="replay_authorization"):
        build("custom", replay_authorization="skip")


async def test_skip_middleware_replays_past_the_middleware_as_accepted() -> None:
    # The documented meaning of the opt-out, so that it cannot silently change.
    built = build("custom", replay_authorization="skip_middleware")
    call = {"name": "invoice", "arguments": {"amount": 8}, "idempotencyKey": "skip-1"}
    with serve(built, stateless=True) as url:
        async with http_wire(url, LEGACY, token("billing")) as before:
            first = await before.call(call)
        async with http_wire(url, LEGACY, token()) as after:
            retry = await after.call(call)
    assert answer(retry) == answer(first)
    assert built.runs == [8]


def test_install_refuses_a_fastmcp_whose_middleware_it_cannot_run_before_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A FastMCP whose call_tool has no `run_middleware=` split: idemtools cannot sit after its
    # chain, so install() refuses unless the author opts out.
    server: Any = FastMCP("odd")
    original: Callable[..., Any] = server.call_tool

    async def call_tool(name: str, arguments: Any = None) -> Any:
        return await original(name, arguments)

    monkeypatch.setattr(server, "call_tool", call_tool)
    with pytest.raises(InstallError, match="skip_middleware"):
        idemtools.install(server)
    assert idemtools.installation_of(server) is None


async def test_an_extension_interceptor_answering_for_the_tool_is_the_recorded_execution() -> None:
    # FastMCP's extension interceptors run after its middleware and before the tool (a task
    # queue answers with its task-creation result there). That answer is the execution: it is
    # recorded and replayed, never produced twice; the middleware still runs on the replay.
    from fastmcp.server.extensions import ServerExtension
    from fastmcp.tools import ToolResult

    built = build("custom")
    queued: list[str] = []

    class Queue(ServerExtension):  # type: ignore[misc]
        identifier = "io.github.idemtools/test-queue"

        async def intercept_tool_call(self, params: Any, context: Any, call_next: Any) -> Any:
            queued.append(params.name)
            return ToolResult(content=f"queued #{len(queued)}")

    built.server.add_extension(Queue())
    call = {"name": "invoice", "arguments": {"amount": 4}, "idempotencyKey": "q-1"}
    with serve(built, stateless=True) as url:
        async with http_wire(url, MODERN, token("billing")) as alice:
            first = await alice.call(call)
            again = await alice.call(call)
        async with http_wire(url, MODERN, token()) as revoked:
            refused = await revoked.call(call)
    assert result_text(first) == "queued #1", first
    assert answer(again) == answer(first)
    assert "queued" not in json.dumps(refused) and "billing scope required" in json.dumps(refused)
    assert queued == ["invoice"] and built.runs == []


async def test_the_decision_still_comes_before_argument_validation() -> None:
    # The contract: decided before validation. The same key with arguments FastMCP would refuse
    # is a conflict, not a validation error, even with middleware in front.
    built = build("custom")
    with serve(built, stateless=True) as url:
        async with http_wire(url, LEGACY, token("billing")) as alice:
            await alice.call({"name": "invoice", "arguments": {"amount": 1}, "idempotencyKey": "v"})
            bad = await alice.call(
                {"name": "invoice", "arguments": {"amount": "one"}, "idempotencyKey": "v"}
            )
    assert bad["error"]["data"]["type"] == "idempotency_key_conflict", bad
    assert built.runs == [1]


@pytest.mark.parametrize("how", ["cancelled", "disconnected"])
async def test_a_keyed_call_whose_caller_left_finishes_and_its_retry_replays(how: str) -> None:
    # Deciding at the end of FastMCP's chain must keep the engine's guarantee: once the tool
    # started, a caller that cancels or goes away does not stop it; the outcome is recorded.
    import anyio
    from fastmcp import Client

    from idemtools.client import NO_RETRY, call_tool
    from tests.fastmcp.app import make_app, text

    app = make_app(middleware=[RequireNothing()])

    async def keyed(client: Any) -> Any:
        return await call_tool(
            client.session, "slow", {"n": 1}, idempotency_key="gone-1", retry=NO_RETRY
        )

    async def connect_and_call() -> None:
        async with Client(app.server) as client:
            if how == "disconnected":  # the whole connection goes while the tool runs
                await keyed(client)
                return
            async with anyio.create_task_group() as calls:  # only the request is cancelled
                calls.start_soon(keyed, client)
                with anyio.fail_after(10):
                    await app.started.wait()
                calls.cancel_scope.cancel()
            await anyio.sleep(0.1)  # the client stays connected a little

    async with anyio.create_task_group() as tg:
        tg.start_soon(connect_and_call)
        with anyio.fail_after(10):
            await app.started.wait()
        if how == "disconnected":
            tg.cancel_scope.cancel()
    app.gate.set()
    with anyio.fail_after(10):
        while app.installation.engine.executing:
            await anyio.sleep(0.02)
    async with Client(app.server) as client:
        assert text(await keyed(client)) == "slow 1"
    assert app.count("slow") == 1


class RequireNothing(Middleware):  # type: ignore[misc]  # Any without fastmcp
    """A middleware in the chain, so that the call is decided at its end."""

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        return await call_next(context)
