"""Scope strategies: whose records a key can match."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools import (
    AuthInfo,
    CallContext,
    Scope,
    ScopeUnavailableError,
    by_auth_subject,
    by_client_id,
    local_user,
    per_session,
    scope,
    shared,
)
from idemtools import local_transport as idemtools_local
from tests.budget import examples

ISSUER = "https://as.example"


def http(auth: AuthInfo | None = None, **kw: Any) -> CallContext:
    return CallContext(transport="http", auth=auth, **kw)


# --------------------------------------------------------------------------------------------
# by_auth_subject
# --------------------------------------------------------------------------------------------


def test_same_caller_same_scope() -> None:
    a = http(AuthInfo(issuer=ISSUER, subject="alice"))
    b = http(AuthInfo(issuer=ISSUER, subject="alice"), session_id="another session")
    assert by_auth_subject(a) == by_auth_subject(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (AuthInfo(issuer=ISSUER, subject="alice"), AuthInfo(issuer=ISSUER, subject="bob")),
        (
            AuthInfo(issuer=ISSUER, subject="alice"),
            AuthInfo(issuer="https://other", subject="alice"),
        ),
        (AuthInfo(issuer=ISSUER, subject="alice"), AuthInfo(subject="alice")),
        (AuthInfo(issuer=ISSUER, subject="a", client_id="x"), AuthInfo(issuer=ISSUER, subject="x")),
    ],
)
def test_different_callers_different_scopes(a: AuthInfo, b: AuthInfo) -> None:
    assert by_auth_subject(http(a)) != by_auth_subject(http(b))


def test_subject_wins_over_client_id() -> None:
    a = http(AuthInfo(issuer=ISSUER, subject="alice", client_id="app-1"))
    b = http(AuthInfo(issuer=ISSUER, subject="alice", client_id="app-2"))
    assert by_auth_subject(a) == by_auth_subject(b)


def test_two_users_of_one_client_app_without_subjects_are_refused() -> None:
    # A client id names an application; scoping by it pools all of its users.
    alice = http(AuthInfo(issuer=ISSUER, client_id="app-1", scopes=("mcp",)))
    bob = http(AuthInfo(issuer=ISSUER, client_id="app-1", scopes=("mcp",)))
    for ctx in (alice, bob):
        with pytest.raises(ScopeUnavailableError) as refused:
            by_auth_subject(ctx)
        message = refused.value.message
        assert "no subject" in message and "by_client_id" in message  # why, and what to do


def test_by_client_id_is_the_explicit_opt_in() -> None:
    one = http(AuthInfo(issuer=ISSUER, client_id="app-1"))
    assert by_client_id(one) == by_client_id(http(AuthInfo(issuer=ISSUER, client_id="app-1")))
    assert by_client_id(one) != by_client_id(http(AuthInfo(issuer=ISSUER, client_id="app-2")))
    assert by_client_id(one) != by_client_id(http(AuthInfo(issuer="https://b", client_id="app-1")))
    # subject and client id are different principals even when spelled alike
    assert by_client_id(one) != by_auth_subject(http(AuthInfo(issuer=ISSUER, subject="app-1")))
    for ctx in (http(), http(AuthInfo(subject="alice")), CallContext(transport="stdio")):
        with pytest.raises(ScopeUnavailableError):
            by_client_id(ctx)


def test_same_subject_from_two_issuers_never_meets() -> None:
    a = http(AuthInfo(issuer="https://as-1.example", subject="alice"))
    b = http(AuthInfo(issuer="https://as-2.example", subject="alice"))
    assert by_auth_subject(a) != by_auth_subject(b)


@pytest.mark.parametrize(
    "context",
    [
        http(),
        http(AuthInfo()),
        http(AuthInfo(issuer=ISSUER)),
        http(AuthInfo(issuer=ISSUER, subject="", client_id="")),
        http(session_id="s1"),
        CallContext(),  # unknown transport: no local user to fall back on
        CallContext(transport="unknown", session_id="ws-1"),  # e.g. the mcp 1.x WebSocket
    ],
)
def test_no_authenticated_caller_over_http_is_unavailable(context: CallContext) -> None:
    with pytest.raises(ScopeUnavailableError):
        by_auth_subject(context)


@pytest.mark.parametrize("transport", ["stdio", "memory"])
def test_local_transports_use_the_local_user(transport: Any) -> None:
    ctx = CallContext(transport=transport)
    assert by_auth_subject(ctx) == local_user(ctx)
    # an authenticated caller still wins on a local transport
    authed = CallContext(transport=transport, auth=AuthInfo(issuer=ISSUER, subject="alice"))
    assert by_auth_subject(authed) == by_auth_subject(http(authed.auth))
    assert by_auth_subject(authed) != local_user(ctx)


def test_unknown_transport_is_refused_and_says_what_to_do() -> None:
    with pytest.raises(ScopeUnavailableError) as refused:
        by_auth_subject(CallContext(transport="unknown", session_id="ws-1"))
    assert "per_session" in refused.value.message
    # the operator's choice for that transport works there
    assert per_session(CallContext(transport="unknown", session_id="ws-1"))


def test_local_user_names_this_process_user() -> None:
    value = local_user(CallContext())
    assert value == local_user(http(AuthInfo(subject="anyone")))  # ignores the request
    if hasattr(os, "getuid"):
        assert str(os.getuid()) in value


@settings(max_examples=examples(300), deadline=None)
@given(
    st.tuples(
        st.none() | st.text(max_size=8),
        st.none() | st.text(max_size=8),
        st.none() | st.text(max_size=8),
    ),
    st.tuples(
        st.none() | st.text(max_size=8),
        st.none() | st.text(max_size=8),
        st.none() | st.text(max_size=8),
    ),
)
def test_distinct_identities_never_share_a_scope(
    a: tuple[str | None, str | None, str | None], b: tuple[str | None, str | None, str | None]
) -> None:
    def identity(t: tuple[str | None, str | None, str | None]) -> tuple[str, str] | None:
        issuer, subject, _client = t
        return (str(issuer), subject) if subject else None

    ia, ib = identity(a), identity(b)
    if ia is None or ib is None:
        return
    if "\x1f" in "".join(ia + ib):
        return  # see test_separator_in_identities_cannot_collide
    sa = by_auth_subject(http(AuthInfo(*a)))
    sb = by_auth_subject(http(AuthInfo(*b)))
    assert (sa == sb) == (ia == ib)


def test_separator_in_identities_cannot_collide() -> None:
    a = http(AuthInfo(issuer="i\x1fsub:a", subject="b"))
    b = http(AuthInfo(issuer="i", subject="a\x1fsub:b"))
    assert by_auth_subject(a) != by_auth_subject(b)


# --------------------------------------------------------------------------------------------
# per_session, shared
# --------------------------------------------------------------------------------------------


def test_per_session() -> None:
    s1, s2 = http(session_id="s1"), http(session_id="s2")
    assert per_session(s1) == per_session(http(session_id="s1"))
    assert per_session(s1) != per_session(s2)
    with pytest.raises(ScopeUnavailableError):
        per_session(http())
    with pytest.raises(ScopeUnavailableError):
        per_session(http(session_id=""))


@pytest.mark.parametrize(
    "context",
    [CallContext(), http(), http(AuthInfo(subject="a")), CallContext(transport="stdio")],
)
def test_shared_is_one_scope_for_everyone(context: CallContext) -> None:
    assert shared(context) == shared(CallContext())


def test_builtin_strategies_never_collide() -> None:
    values = {
        by_auth_subject(http(AuthInfo(subject="shared"))),
        by_client_id(http(AuthInfo(client_id="shared"))),
        per_session(http(session_id="shared")),
        shared(http()),
        local_user(http()),
    }
    assert len(values) == 5


def test_a_custom_strategy_cannot_spell_a_builtin_value() -> None:
    # Whatever string a custom strategy returns, it lives in its own namespace.
    alice = http(AuthInfo(issuer=ISSUER, subject="alice", client_id="app"), session_id="s")
    builtins = [by_auth_subject, by_client_id, per_session, shared, local_user]
    for strategy in builtins:
        target = strategy(alice)
        forged = Scope(lambda ctx, value=target: value, "forged")  # type: ignore[misc]
        assert forged(alice) != target
        assert forged(alice) not in {b(alice) for b in builtins}
    pair = (by_auth_subject & shared)(alice)
    assert Scope(lambda ctx: pair, "forged pair")(alice) != pair


@pytest.mark.parametrize("value", ["", None, 3])
def test_a_custom_strategy_without_a_value_is_unavailable(value: Any) -> None:
    with pytest.raises(ScopeUnavailableError):
        Scope(lambda ctx: value, "empty")(http())


# --------------------------------------------------------------------------------------------
# composition and custom strategies
# --------------------------------------------------------------------------------------------


@scope("per tenant")
def by_tenant(ctx: CallContext) -> str:
    if not isinstance(ctx.raw, dict) or not ctx.raw.get("tenant"):
        raise ScopeUnavailableError("no tenant")
    return f"tenant:{ctx.raw['tenant']}"


def test_scope_decorator() -> None:
    assert isinstance(by_tenant, Scope)
    assert by_tenant.description == "per tenant"
    assert "per tenant" in repr(by_tenant)
    assert by_tenant(http(raw={"tenant": "acme"})) == json.dumps(["custom", "tenant:acme"])


def test_fallback_uses_the_first_available() -> None:
    either = by_auth_subject | per_session
    assert isinstance(either, Scope)
    alice = http(AuthInfo(issuer=ISSUER, subject="alice"), session_id="s1")
    assert either(alice) == by_auth_subject(alice)
    anon = http(session_id="s1")
    assert either(anon) == per_session(anon)
    with pytest.raises(ScopeUnavailableError):
        either(http())
    assert "else" in either.description


def test_fallback_only_on_unavailable() -> None:
    def broken(ctx: CallContext) -> str:
        raise RuntimeError("bug")

    with pytest.raises(RuntimeError):
        (Scope(broken, "broken") | shared)(http())


def test_fallback_accepts_plain_functions() -> None:
    def constant(ctx: CallContext) -> str:
        return "constant"

    assert (per_session | constant)(http()) == json.dumps(["custom", "constant"])
    assert (per_session & constant)(http(session_id="s")) != (per_session | constant)(http())


def test_both_needs_both() -> None:
    both = by_auth_subject & by_tenant
    ctx = http(AuthInfo(issuer=ISSUER, subject="alice"), raw={"tenant": "acme"})
    value = both(ctx)
    assert value != by_auth_subject(ctx) and value != by_tenant(ctx)
    other_tenant = http(AuthInfo(issuer=ISSUER, subject="alice"), raw={"tenant": "beta"})
    other_subject = http(AuthInfo(issuer=ISSUER, subject="bob"), raw={"tenant": "acme"})
    assert len({value, both(other_tenant), both(other_subject)}) == 3
    with pytest.raises(ScopeUnavailableError):
        both(http(AuthInfo(issuer=ISSUER, subject="alice")))
    with pytest.raises(ScopeUnavailableError):
        both(http(raw={"tenant": "acme"}))
    assert " and " in both.description


def test_composition_chains() -> None:
    chain = by_auth_subject | per_session | shared
    assert chain(http()) == shared(http())
    assert chain(http(session_id="s")) == per_session(http(session_id="s"))


def _pair_scope(a: str, b: str) -> str:
    left = Scope(lambda ctx: a, "a")
    right = Scope(lambda ctx: b, "b")
    return (left & right)(CallContext())


@settings(max_examples=examples(300), deadline=None)
@given(
    st.text(st.characters(exclude_characters="\x1f"), min_size=1, max_size=6),
    st.text(st.characters(exclude_characters="\x1f"), min_size=1, max_size=6),
    st.text(st.characters(exclude_characters="\x1f"), min_size=1, max_size=6),
    st.text(st.characters(exclude_characters="\x1f"), min_size=1, max_size=6),
)
def test_both_is_injective(a: str, b: str, c: str, d: str) -> None:
    assert (_pair_scope(a, b) == _pair_scope(c, d)) == ((a, b) == (c, d))


def test_both_is_injective_with_separator_characters() -> None:
    assert _pair_scope("x\x1fy", "z") != _pair_scope("x", "y\x1fz")


# --------------------------------------------------------------------------------------------
# property: distinct principals never share a scope, across strategies; equal ones always do
# --------------------------------------------------------------------------------------------

_text = st.none() | st.text(max_size=6) | st.sampled_from(["shared", "sub", "client", '"', "["])


@st.composite
def principals(draw: Any) -> CallContext:
    authenticated = draw(st.booleans())
    auth = (
        AuthInfo(issuer=draw(_text), subject=draw(_text), client_id=draw(_text))
        if authenticated
        else None
    )
    transport = draw(st.sampled_from(["stdio", "memory", "http", "unknown"]))
    return CallContext(transport=transport, auth=auth, session_id=draw(_text))


def _identity(strategy: str, ctx: CallContext) -> object:
    """The principal a strategy names (None: it must refuse); equal principals, equal scope."""
    auth = ctx.auth
    if strategy == "by_auth_subject":
        if auth is not None:
            return ("sub", auth.issuer, auth.subject) if auth.subject else None
        # on a local transport the principal *is* the local user (same scope as local_user)
        return ("local_user",) if ctx.transport in ("stdio", "memory") else None
    if strategy == "by_client_id":
        return ("client", auth.issuer, auth.client_id) if auth and auth.client_id else None
    if strategy == "per_session":  # the SDK's session, and the caller of the request in it
        if not ctx.session_id:
            return None
        if auth is None:
            return ("session", ctx.session_id)
        return ("session", ctx.session_id, auth.issuer, auth.subject, auth.client_id)
    if strategy == "custom":  # a user function returning whatever the client controls
        return ("custom", ctx.session_id) if ctx.session_id else None
    return (strategy,)  # shared, local_user: one value each


@scope("echoes a client-controlled value")
def _echo_session(ctx: CallContext) -> str:
    if not ctx.session_id:
        raise ScopeUnavailableError("none")
    return ctx.session_id


_STRATEGIES: dict[str, Scope] = {
    "by_auth_subject": by_auth_subject,
    "by_client_id": by_client_id,
    "per_session": per_session,
    "shared": shared,
    "local_user": local_user,
    "custom": _echo_session,
}


def _value(strategy: Scope, ctx: CallContext) -> str | None:
    try:
        return strategy(ctx)
    except ScopeUnavailableError:
        return None


@settings(max_examples=examples(400), deadline=None)
@given(principals(), principals(), st.sampled_from(sorted(_STRATEGIES)), st.data())
def test_scopes_are_injective_across_strategies(
    p: CallContext, q: CallContext, first: str, data: Any
) -> None:
    second = data.draw(st.sampled_from(sorted(_STRATEGIES)))
    vp, vq = _value(_STRATEGIES[first], p), _value(_STRATEGIES[second], q)
    ip, iq = _identity(first, p), _identity(second, q)
    assert (vp is None) == (ip is None) and (vq is None) == (iq is None)
    if vp is None or vq is None:
        return
    # a custom strategy echoing the built-in's own spelling still gets another value
    forged = Scope(lambda ctx: vp, "forged")(p)
    assert forged != vp
    assert (vp == vq) == (ip == iq)
    assert _value(_STRATEGIES[first], p) == vp  # equal principal, same scope, every time


def test_local_transport_is_declared_for_its_block_only() -> None:
    from idemtools.scopes import declared_local_transport

    assert declared_local_transport() is None
    with idemtools_local("stdio"):
        assert declared_local_transport() == "stdio"
        with idemtools_local("memory"):
            assert declared_local_transport() == "memory"
        assert declared_local_transport() == "stdio"
    assert declared_local_transport() is None
    with pytest.raises(ValueError), idemtools_local("websocket"):  # type: ignore[arg-type]
        pass


def test_sdk_session_ids_are_per_object_random_and_stable() -> None:
    from idemtools.scopes import sdk_session_id

    class Session:
        pass

    a, b = Session(), Session()
    assert sdk_session_id(a) == sdk_session_id(a) != sdk_session_id(b)
    assert len(sdk_session_id(a)) == 32
