"""Scopes: whose records a key can match (SEP-3182, Security Implications).

A scope strategy is any callable `(CallContext) -> str` naming the authorization boundary of
the current request; it raises `ScopeUnavailableError` when it cannot tell. Records are keyed
by (scope, key), so the same key from two callers never meets. Strategies compose:

    by_auth_subject | per_session      # the first one that can answer
    by_auth_subject & by_tenant        # both must answer; the scope is their pair

Scope values are hashed before they reach a store or a log.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ScopeUnavailableError

__all__ = [
    "AuthInfo",
    "CallContext",
    "Scope",
    "by_auth_subject",
    "local_user",
    "per_session",
    "scope",
    "shared",
]

Transport = Literal["stdio", "memory", "http", "unknown"]


@dataclass(frozen=True)
class AuthInfo:
    """The validated caller of the *current* request, as the SDK's token verifier reported it."""

    issuer: str | None = None
    subject: str | None = None
    client_id: str | None = None


@dataclass(frozen=True)
class CallContext:
    """What an SDK adapter tells the engine about the request: transport-free and typed.

    `raw` is the SDK's own request context, for user-written scope functions that need more.
    """

    transport: Transport = "unknown"
    auth: AuthInfo | None = None
    session_id: str | None = None
    raw: Any = field(default=None, compare=False, repr=False)


ScopeFn = Callable[[CallContext], str]


class Scope:
    """A named scope strategy; combine with `|` (fallback) and `&` (both)."""

    def __init__(self, fn: ScopeFn, description: str) -> None:
        self._fn = fn
        self.description = description

    def __call__(self, ctx: CallContext) -> str:
        return self._fn(ctx)

    def __or__(self, other: Scope | ScopeFn) -> Scope:
        second = _as_scope(other)

        def first_available(ctx: CallContext) -> str:
            try:
                return self(ctx)
            except ScopeUnavailableError:
                return second(ctx)

        return Scope(first_available, f"{self.description}, else {second.description}")

    def __and__(self, other: Scope | ScopeFn) -> Scope:
        second = _as_scope(other)

        def both(ctx: CallContext) -> str:
            # JSON, not a separator: no pair of values can spell another pair.
            return json.dumps([self(ctx), second(ctx)])

        return Scope(both, f"{self.description} and {second.description}")

    def __repr__(self) -> str:
        return f"Scope({self.description!r})"


def scope(description: str) -> Callable[[ScopeFn], Scope]:
    """Decorator for your own strategy: `@scope("per tenant")` over `def f(ctx) -> str`.

    Raise `ScopeUnavailableError` when the request carries no answer: idemtools then refuses
    the keyed call instead of guessing a shared namespace.
    """

    def wrap(fn: ScopeFn) -> Scope:
        return Scope(fn, description)

    return wrap


def _as_scope(value: Scope | ScopeFn) -> Scope:
    if isinstance(value, Scope):
        return value
    return Scope(value, getattr(value, "__name__", "custom scope"))


@functools.cache
def _local_identity() -> str:  # constant for the process; the lookup costs a passwd read
    try:
        user = getpass.getuser()
    except Exception:  # no login name (containers): the uid still names the boundary
        user = "?"
    uid = os.getuid() if hasattr(os, "getuid") else -1
    return f"local:{socket.gethostname()}:{uid}:{user}"


@scope("the local user who started the server process")
def local_user(ctx: CallContext) -> str:
    """The OS user running this server: the boundary of a stdio or in-process server."""
    return _local_identity()


@scope("per authenticated subject (issuer + subject, else client id)")
def by_auth_subject(ctx: CallContext) -> str:
    """The authenticated caller of the current request; the local user on stdio/in-memory.

    HTTP without an authenticated caller has no boundary to scope by: refused, never pooled.
    """
    auth = ctx.auth
    if auth is not None and (auth.subject or auth.client_id):
        if auth.subject:
            return json.dumps(["auth", auth.issuer or "", "sub", auth.subject])
        return json.dumps(["auth", auth.issuer or "", "client", auth.client_id])
    if ctx.transport in ("stdio", "memory"):
        return _local_identity()
    raise ScopeUnavailableError(
        "this tool deduplicates per authenticated caller, and the request carries no "
        "validated access token"
    )


@scope("per session (transport session id)")
def per_session(ctx: CallContext) -> str:
    """The transport session; unavailable on stateless HTTP, which has none."""
    if ctx.session_id:
        return f"session:{ctx.session_id}"
    raise ScopeUnavailableError("this tool deduplicates per session, and the request has none")


@scope("one scope shared by every caller (explicit opt-in)")
def shared(ctx: CallContext) -> str:
    """Every caller shares one namespace: only for single-tenant servers that choose it."""
    return "shared"
