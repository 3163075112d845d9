"""Scope strategies: whose records a key can match."""

from __future__ import annotations

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
    local_user,
    per_session,
    scope,
    shared,
)

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
        (AuthInfo(client_id="app-1"), AuthInfo(client_id="app-2")),
        (AuthInfo(issuer=ISSUER, subject="x"), AuthInfo(issuer=ISSUER, client_id="x")),
        (AuthInfo(subject="client:x"), AuthInfo(client_id="x")),
        (AuthInfo(issuer=ISSUER, subject="alice"), AuthInfo(subject="alice")),
    ],
)
def test_different_callers_different_scopes(a: AuthInfo, b: AuthInfo) -> None:
    assert by_auth_subject(http(a)) != by_auth_subject(http(b))


def test_subject_wins_over_client_id() -> None:
    a = http(AuthInfo(issuer=ISSUER, subject="alice", client_id="app-1"))
    b = http(AuthInfo(issuer=ISSUER, subject="alice", client_id="app-2"))
    assert by_auth_subject(a) == by_auth_subject(b)


def test_client_id_when_no_subject() -> None:
    value = by_auth_subject(http(AuthInfo(issuer=ISSUER, client_id="app-1")))
    assert "app-1" in value


@pytest.mark.parametrize(
    "context",
    [
        http(),
        http(AuthInfo()),
        http(AuthInfo(issuer=ISSUER)),
        http(AuthInfo(issuer=ISSUER, subject="", client_id="")),
        http(session_id="s1"),
        CallContext(),  # unknown transport: no local user to fall back on
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


def test_local_user_names_this_process_user() -> None:
    value = local_user(CallContext())
    assert value == local_user(http(AuthInfo(subject="anyone")))  # ignores the request
    if hasattr(os, "getuid"):
        assert str(os.getuid()) in value


@settings(max_examples=300, deadline=None)
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
    def identity(t: tuple[str | None, str | None, str | None]) -> tuple[str, str, str] | None:
        issuer, subject, client = t
        if subject:
            return (issuer or "", "sub", subject)
        if client:
            return (issuer or "", "client", client)
        return None

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
        by_auth_subject(http(AuthInfo(client_id="shared"))),
        per_session(http(session_id="shared")),
        shared(http()),
        local_user(http()),
    }
    assert len(values) == 5


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
    assert by_tenant(http(raw={"tenant": "acme"})) == "tenant:acme"


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

    assert (per_session | constant)(http()) == "constant"
    assert (per_session & constant)(http(session_id="s")) != "constant"


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


@settings(max_examples=300, deadline=None)
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
