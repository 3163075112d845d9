"""Scopes that cannot work on the transport a server serves, found at start-up.

A scope that never answers on a transport (`by_auth_subject` over HTTP without a token
verifier, `per_session` on stateless HTTP, `by_client_id` on stdio) refuses every keyed call
with `idempotency_scope_unavailable`; found only when a call arrives, that is an outage
discovered in production. Adapters describe what they serve (`Serving`) as soon as they know
it (the stdio runner, the HTTP app being built); the installation logs one WARNING per affected
tool. Transport-free: the built-in strategies are probed with synthetic `CallContext`s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..errors import ScopeUnavailableError
from ..scopes import AuthInfo, CallContext, Scope, by_auth_subject, per_session

__all__ = ["Serving", "unusable", "warn_unusable_scopes"]

log = logging.getLogger("idemtools")


@dataclass(frozen=True)
class Serving:
    """What a server serves, as far as scopes care.

    Attributes:
        transport: "stdio", "HTTP" (streamable HTTP) or "SSE".
        authenticated: HTTP/SSE: a token verifier validates every caller's access token.
        sessions: the SDK holds a session per connection (stateful HTTP, SSE, stdio); False
            on stateless HTTP.
        modern_era: 2026-07-28 clients can connect (mcp 2.x, FastMCP 4.x): that era has no
            sessions on any transport.
    """

    transport: Literal["stdio", "HTTP", "SSE"]
    authenticated: bool = False
    sessions: bool = True
    modern_era: bool = True

    def describe(self) -> str:
        if self.transport == "stdio":
            return "stdio"
        kind = (
            "stateless HTTP" if self.transport == "HTTP" and not self.sessions else self.transport
        )
        return f"{kind} {'with' if self.authenticated else 'without'} authentication"


_PROBE_AUTH = AuthInfo(issuer="https://probe.invalid", subject="probe", client_id="probe")


def _contexts(serving: Serving, *, modern: bool) -> CallContext:
    """A synthetic call on `serving`, in the 2025-11-25 era or (modern) the 2026-07-28 one."""
    session = None if modern else "probe-session"
    if serving.transport == "stdio":
        return CallContext(transport="stdio", session_id=session, tool="probe")
    return CallContext(
        transport="http",
        auth=_PROBE_AUTH if serving.authenticated else None,
        session_id=session if serving.sessions else None,
        tool="probe",
    )


def _answers(scope: Scope, ctx: CallContext) -> bool | None:
    try:
        scope(ctx)
    except ScopeUnavailableError:
        return False
    except Exception:  # cannot tell: never warn on a guess
        return None
    return True


def _works(scope: Scope, serving: Serving) -> tuple[bool | None, bool | None]:
    """(answers in the 2025-11-25 era, answers in the 2026-07-28 era or None if not served)."""
    legacy = _answers(scope, _contexts(serving, modern=False))
    modern = _answers(scope, _contexts(serving, modern=True)) if serving.modern_era else None
    return legacy, modern


def _fully(scope: Scope, serving: Serving) -> bool:
    legacy, modern = _works(scope, serving)
    return legacy is True and (modern is True or not serving.modern_era)


def unusable(scope: Scope, serving: Serving) -> str | None:
    """Why keyed calls under `scope` are refused on `serving` (and what to change), or None
    when they work, or when idemtools cannot tell (a strategy of your own)."""
    if not scope._probeable:
        return None
    legacy, modern = _works(scope, serving)
    if legacy is None or (modern is None and serving.modern_era):
        return None
    where = serving.describe()
    if not legacy and not modern:
        return (
            f"scope {scope.name} cannot work on {where}: every keyed call to it is refused "
            f"with idempotency_scope_unavailable. {_fix(scope, serving)}"
        )
    if legacy and modern is False:
        return (
            f"scope {scope.name} needs a session, and 2026-07-28 clients have none: their "
            f"keyed calls to it on {where} are refused with idempotency_scope_unavailable "
            f"(2025-11-25 clients are served). {_fix(scope, serving)}"
        )
    return None


def _fix(scope: Scope, serving: Serving) -> str:
    changes: list[str] = []
    if serving.transport != "stdio":
        if not serving.authenticated and _fully(
            scope, Serving(serving.transport, True, serving.sessions, serving.modern_era)
        ):
            changes.append("configure a token verifier (the server's auth=)")
        if not serving.sessions and _fully(
            scope, Serving(serving.transport, serving.authenticated, True, False)
        ):
            changes.append("serve stateful HTTP (stateless_http=False; 2025-11-25 clients only)")
    alternatives = [
        alt.name
        for alt in (by_auth_subject, by_auth_subject | per_session, per_session)
        if alt.name != scope.name and _fully(alt, serving)
    ]
    if alternatives:
        changes.append(f"give it scope={alternatives[0]}")
    else:
        changes.append("give it scope=shared if one namespace for every caller is what you want")
    return ("Change: " + ", or ".join(changes)) + "."


def warn_unusable_scopes(tools: Iterable[tuple[str, Scope]], serving: Serving) -> list[str]:
    """Log one WARNING per tool whose scope cannot work on `serving`; return the messages."""
    found: list[str] = []
    for name, scope in tools:
        problem = unusable(scope, serving)
        if problem is not None:
            message = f"tool {name!r}: {problem}"
            log.warning("idemtools: %s", message)
            found.append(message)
    return found
