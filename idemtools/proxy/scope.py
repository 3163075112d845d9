"""Whose records a key can match behind the proxy, and who may have a replay.

stdio: the local user who started the proxy (one host, one user: the SEP's stdio boundary).
HTTP: the caller's credential, as the proxy itself verified it — never a value the client
merely sent. With `--issuer/--jwks-url/--audience` the proxy verifies bearer JWTs and scopes by
(issuer, subject); with `--scope token-hash` by a SHA-256 of the presented credential (opaque
tokens: a rotated token is a new scope, and possessing the token is what authorizes a replay);
with neither, keyed calls over HTTP are refused (fail closed), exactly as the library does.

Per-tool authorization rules (`AuthRule`) run before every execution and every replay: the
proxy answers a replay itself, so the upstream's own authorization never sees it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ScopeUnavailableError
from ..scopes import CallContext, Scope, by_auth_subject, by_client_id, local_user, shared

__all__ = ["SCOPE_NAMES", "AuthRule", "RequestInfo", "credential_hash", "scope_named"]


@dataclass(frozen=True)
class RequestInfo:
    """What the proxy knows of one request, beyond the `CallContext` (its `raw`).

    Attributes:
        credential_hash: SHA-256 (hex) of the presented `Authorization` value, when any.
        claims: the verified JWT's claims, when the proxy verified one.
    """

    credential_hash: str | None = None
    claims: Mapping[str, Any] = field(default_factory=dict)
    authorization: str = field(default="", repr=False)
    """The presented `Authorization` value, for `--confirm-credential` only (never logged)."""
    session: str = ""
    """The request's `Mcp-Session-Id`, so that the confirmation is a request of the same
    session (a session-bound upstream refuses a request without one)."""


def credential_hash(authorization: str) -> str:
    """The scope value of an opaque credential: a hash, so no store or log ever holds it."""
    return hashlib.sha256(authorization.strip().encode("utf-8", "surrogatepass")).hexdigest()


def _token_hash(ctx: CallContext) -> str:
    info = ctx.raw
    digest = getattr(info, "credential_hash", None)
    if ctx.transport == "http" and isinstance(digest, str) and digest:
        return digest
    raise ScopeUnavailableError(
        "this tool is scoped by a hash of the caller's credential (--scope token-hash), and "
        "the request carries no Authorization header"
    )


token_hash = Scope(
    _token_hash,
    "per presented credential (a hash of the bearer token; a rotated token is a new scope)",
    name="token_hash",
    kind="token_hash",
    on={
        "HTTP": "per presented credential (a hash of the bearer token)",
        "stdio": None,
    },
)

_BY_NAME: dict[str, Scope] = {
    "subject": by_auth_subject,
    "local": local_user,
    "shared": shared,
    "token-hash": token_hash,
    "client": by_client_id,
}
SCOPE_NAMES: tuple[str, ...] = tuple(_BY_NAME)


def scope_named(name: str) -> Scope:
    """The scope strategy for a `--scope` / `scope =` value."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unknown scope {name!r}; expected one of {', '.join(SCOPE_NAMES)}"
        ) from None


def scope_name(scope: Scope) -> str:
    """The configuration name of a scope strategy (for logs and docs)."""
    for name, known in _BY_NAME.items():
        if known is scope:
            return name
    return scope.name


@dataclass(frozen=True)
class AuthRule:
    """`[tools.X] authorize = { scopes = [...], claims = {...} }`: what a verified JWT must
    carry for an execution *and* a replay of that tool. Without a verified JWT (stdio, a
    token-hash credential, an expired or foreign token) the rule refuses: fail closed."""

    scopes: tuple[str, ...] = ()
    claims: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, table: Mapping[str, Any]) -> AuthRule:
        unknown = set(table) - {"scopes", "claims"}
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}")
        scopes = table.get("scopes", [])
        claims = table.get("claims", {})
        if not isinstance(scopes, Sequence) or isinstance(scopes, str):
            raise ValueError("scopes must be a list of strings")
        if not isinstance(claims, Mapping):
            raise ValueError("claims must be a table of claim = value")
        return cls(
            scopes=tuple(str(s) for s in scopes),
            claims=tuple((str(k), json.dumps(v)) for k, v in claims.items()),
        )

    def __call__(self, ctx: CallContext) -> bool:
        claims = getattr(ctx.raw, "claims", None)
        if ctx.auth is None or not claims:
            return False
        if not set(self.scopes) <= set(ctx.auth.scopes):
            return False
        return all(
            name in claims and json.dumps(claims[name]) == value for name, value in self.claims
        )
