"""Start-up check of scopes against the transport served: transport-free."""

from __future__ import annotations

import logging

import pytest

from idemtools import by_auth_subject, by_client_id, local_user, per_session, scope, shared
from idemtools.scopes import CallContext
from idemtools.server.scope_fit import Serving, unusable, warn_unusable_scopes

HTTP_ANON = Serving("HTTP", authenticated=False)
HTTP_AUTH_STATELESS = Serving("HTTP", authenticated=True, sessions=False)
STDIO = Serving("stdio")

REFUSED = [
    (by_auth_subject, HTTP_ANON, "cannot work on HTTP without authentication", "token verifier"),
    (by_client_id, HTTP_ANON, "cannot work on HTTP without authentication", "token verifier"),
    (per_session, HTTP_AUTH_STATELESS, "cannot work on stateless HTTP", "stateful HTTP"),
    (by_client_id, STDIO, "cannot work on stdio", "scope=by_auth_subject"),
    (by_client_id, Serving("stdio", modern_era=False), "cannot work on stdio", "by_auth_subject"),
    (per_session, STDIO, "2026-07-28 clients have none", "scope=by_auth_subject"),
    (per_session, Serving("HTTP", True, True), "2026-07-28 clients have none", "by_auth_subject"),
    (
        by_auth_subject | per_session,
        Serving("HTTP", authenticated=False, sessions=False),
        "cannot work on stateless HTTP without authentication",
        "token verifier",
    ),
    (by_auth_subject & shared, HTTP_ANON, "cannot work", "token verifier"),
]

WORKS = [
    (by_auth_subject, STDIO),
    (by_auth_subject, Serving("HTTP", authenticated=True, sessions=False)),
    (by_client_id, Serving("HTTP", authenticated=True)),
    (per_session, Serving("HTTP", sessions=True, modern_era=False)),
    (per_session, Serving("SSE", modern_era=False)),
    (by_auth_subject | per_session, Serving("HTTP", authenticated=True)),
    (shared, HTTP_ANON),
    (local_user, HTTP_ANON),
    (per_session | shared, HTTP_AUTH_STATELESS),
]


@pytest.mark.parametrize(("strategy", "serving", "why", "fix"), REFUSED)
def test_a_scope_that_cannot_work_there_is_named_with_what_to_change(
    strategy: object, serving: Serving, why: str, fix: str
) -> None:
    problem = unusable(strategy, serving)  # type: ignore[arg-type]
    assert problem is not None
    assert why in problem and fix in problem, problem
    assert "idempotency_scope_unavailable" in problem


@pytest.mark.parametrize(("strategy", "serving"), WORKS)
def test_a_scope_that_works_there_is_not_warned_about(strategy: object, serving: Serving) -> None:
    assert unusable(strategy, serving) is None  # type: ignore[arg-type]


def test_a_strategy_of_your_own_is_never_called_at_start_up() -> None:
    calls: list[CallContext] = []

    @scope("per tenant")
    def tenant(ctx: CallContext) -> str:
        calls.append(ctx)
        raise RuntimeError("needs a real request")

    for serving in (HTTP_ANON, STDIO, HTTP_AUTH_STATELESS):
        assert unusable(tenant, serving) is None
        assert unusable(by_client_id | tenant, serving) is None
    assert calls == []


def test_one_warning_per_affected_tool_naming_tool_scope_and_transport(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tools = [("charge", by_auth_subject), ("ship", shared), ("refund", by_client_id)]
    with caplog.at_level(logging.WARNING, logger="idemtools"):
        found = warn_unusable_scopes(tools, HTTP_ANON)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(found) == len(warned) == 2
    assert "'charge'" in warned[0] and "by_auth_subject" in warned[0]
    assert "'refund'" in warned[1] and "by_client_id" in warned[1]
    assert all("HTTP without authentication" in w for w in warned)
