"""Over FastMCP's own HTTP app (uvicorn on 127.0.0.1), with FastMCP's `auth=`: records are
scoped to the caller its token verifier validated, in both eras, stateful and stateless."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import contextlib  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from fastmcp.server.auth import require_scopes  # noqa: E402
from fastmcp.server.auth.providers.jwt import (  # noqa: E402
    JWTVerifier,
    RSAKeyPair,
    StaticTokenVerifier,
)

from idemtools import idempotent  # noqa: E402
from tests.e2e.harness import (  # noqa: E402
    LEGACY,
    MODERN,
    error_type,
    http_wire,
    result_text,
    serve_asgi,
)
from tests.fastmcp.app import App, make_app  # noqa: E402

SHAPES = [(False, LEGACY), (True, LEGACY), (True, MODERN)]  # (stateless, era)


def serve(app: App, *, stateless: bool) -> contextlib.AbstractContextManager[str]:
    """FastMCP's `http_app()` under uvicorn on a free port; yields the endpoint URL."""
    asgi = app.server.http_app(path="/mcp", stateless_http=stateless, json_response=stateless)
    return serve_asgi(asgi, "/mcp")


def charge(key: str, amount: int = 7) -> dict[str, Any]:
    return {"name": "charge", "arguments": {"amount": amount}, "idempotencyKey": key}


STATIC = {
    "tok-alice": {"client_id": "app", "sub": "alice", "scopes": []},
    "tok-bob": {"client_id": "app", "sub": "bob", "scopes": []},  # same client, other user
}


@pytest.mark.parametrize(("stateless", "era"), SHAPES)
async def test_two_principals_never_replay_each_other(stateless: bool, era: str) -> None:
    app = make_app(auth=StaticTokenVerifier(tokens=STATIC))
    with serve(app, stateless=stateless) as url:
        async with (
            http_wire(url, era, "tok-alice") as alice,
            http_wire(url, era, "tok-bob") as bob,
        ):
            assert alice.initialize["capabilities"]["tools"]["idempotency"] == {}
            first = result_text(await alice.call(charge("shared-key")))
            assert result_text(await alice.call(charge("shared-key"))) == first  # replayed
            theirs = result_text(await bob.call(charge("shared-key")))
            assert theirs != first and theirs.startswith("charged 7")
            # Bob's own record, not Alice's: his other arguments conflict only with his.
            reply = await bob.call(charge("shared-key", amount=8))
            assert error_type(reply) == "idempotency_key_conflict"
    assert app.count("charge") == 2


async def test_a_caller_without_a_token_is_turned_away_by_fastmcp() -> None:
    app = make_app(auth=StaticTokenVerifier(tokens=STATIC))
    with serve(app, stateless=True) as url:
        async with http_wire(url, LEGACY, None) as anonymous:
            assert anonymous.last_status == 401
    assert app.runs == []


@pytest.mark.parametrize("era", [LEGACY, MODERN])
async def test_jwt_subjects_are_scoped_per_issuer(era: str) -> None:
    # The same `sub` from two issuers is two principals: the scope is (iss, sub).
    keys = RSAKeyPair.generate()
    issuers = ["https://one.example", "https://two.example"]
    verifier = JWTVerifier(public_key=keys.public_key, issuer=issuers, audience="idemtools")
    app = make_app(auth=verifier)
    one, two = (keys.create_token(subject="u", issuer=i, audience="idemtools") for i in issuers)
    with serve(app, stateless=True) as url:
        async with http_wire(url, era, one) as a, http_wire(url, era, two) as b:
            first = result_text(await a.call(charge("jwt-key")))
            assert result_text(await a.call(charge("jwt-key"))) == first
            assert result_text(await b.call(charge("jwt-key"))) != first
    assert app.count("charge") == 2


async def test_a_caller_who_lost_access_to_a_tool_gets_no_replay() -> None:
    # FastMCP's component auth (`auth=require_scopes(...)`) hides the tool from a caller
    # without the scope; idemtools then claims, records and replays nothing for that caller.
    tokens = {"tok-alice": {"client_id": "app", "sub": "alice", "scopes": ["pay"]}}
    app = make_app(auth=StaticTokenVerifier(tokens=tokens))

    @app.server.tool(name="payout", auth=require_scopes("pay"))
    @idempotent
    def payout(amount: int) -> str:
        app.runs.append(("payout", amount))
        return f"paid out {amount}"

    call = {"name": "payout", "arguments": {"amount": 9}, "idempotencyKey": "p1"}
    with serve(app, stateless=True) as url:
        async with http_wire(url, LEGACY, "tok-alice") as alice:
            assert result_text(await alice.call(call)) == "paid out 9"
            assert result_text(await alice.call(call)) == "paid out 9"  # replayed
            tokens["tok-alice"]["scopes"] = []  # access revoked
            refused = await alice.call(call)
            assert refused["result"]["isError"] is True
            assert "paid out" not in result_text(refused)
    assert app.count("payout") == 1
    stats = app.installation.engine.stats
    assert (stats.executions, stats.replays) == (1, 1)
