"""by_auth_subject over real streamable HTTP with a token verifier (uvicorn on 127.0.0.1)."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

from .harness import ERAS, LEGACY, error_type, http_wire, make_app, result_text, serve_http

MODES = [(stateless, era) for stateless in (False, True) for era in ERAS]


@pytest.mark.parametrize(
    ("stateless", "era"), MODES, ids=[f"{'stateless' if s else 'stateful'}-{e}" for s, e in MODES]
)
async def test_two_subjects_one_key_both_run_and_never_meet(stateless: bool, era: str) -> None:
    app = make_app(auth=True, stateless=stateless)
    with serve_http(app, stateless=stateless) as url:
        async with AsyncExitStack() as stack:
            alice = await stack.enter_async_context(http_wire(url, era, token="tok-alice"))
            bob = await stack.enter_async_context(http_wire(url, era, token="tok-bob"))
            a1 = await alice.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k"}
            )
            b1 = await bob.call(
                {"name": "charge", "arguments": {"amount": 2}, "idempotencyKey": "k"}
            )
            a2 = await alice.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k"}
            )
            b2 = await bob.call(
                {"name": "charge", "arguments": {"amount": 2}, "idempotencyKey": "k"}
            )
    # Bob's other arguments are not a conflict: his key lives in his own scope.
    assert result_text(a1) == "charged 1 usd #1" and result_text(b1) == "charged 2 usd #2"
    assert a2["result"] == a1["result"] and b2["result"] == b1["result"]
    assert app.count("charge") == 2


@pytest.mark.parametrize("era", ERAS)
async def test_http_without_a_caller_is_refused(era: str) -> None:
    app = make_app(auth=False, stateless=True)
    with serve_http(app, stateless=True) as url:
        async with http_wire(url, era) as anonymous:
            reply = await anonymous.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-anon"}
            )
            plain = await anonymous.call({"name": "charge", "arguments": {"amount": 1}})
            shared = await anonymous.call(
                {"name": "echo", "arguments": {"value": 1}, "idempotencyKey": "k-anon"}
            )
    assert error_type(reply) == "idempotency_scope_unavailable"
    assert "result" in plain  # unkeyed calls are untouched
    assert "result" in shared  # a tool that opted into the shared scope works anonymously
    assert app.count("charge") == 1


async def test_scope_follows_the_current_request_not_the_session_creator() -> None:
    # mcp's get_access_token() reports the token that created a stateful session; idemtools
    # must scope by the token of the request at hand. mcp >= 1.30 and 2.x refuse a session
    # reused by another principal (404); older releases let it through, and then the scope
    # must still be the new caller's.
    app = make_app(auth=True, stateless=False)
    with serve_http(app, stateless=False) as url:
        async with http_wire(url, LEGACY, token="tok-alice") as alice:
            first = await alice.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-s"}
            )
            alice.headers["Authorization"] = "Bearer tok-mallory"
            other = await alice.call(
                {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-s"}
            )
            status = alice.last_status
    assert "result" in first
    if status == 404:  # the SDK bound the session to its principal
        assert app.count("charge") == 1
    else:
        assert status == 200
        # Mallory's call ran in Mallory's scope: not a replay of Alice's charge.
        assert app.count("charge") == 2
        assert result_text(other) == "charged 1 usd #2"
