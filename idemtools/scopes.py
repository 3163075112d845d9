"""Scopes: whose records a key can match (SEP-3182, Security Implications).

A scope strategy is any callable `(CallContext) -> str` naming the authorization boundary of
the current request; it raises `ScopeUnavailableError` when it cannot tell. Records are keyed
by (scope, key), so the same key from two callers never meets. Strategies compose:

    by_auth_subject | per_session      # the first one that can answer
    by_auth_subject & by_tenant        # both must answer; the scope is their pair

Every value is namespaced by the strategy that produced it (a JSON array whose first element
names the strategy; a user-written strategy's value is wrapped as `["custom", value]`), so no
strategy can spell another's value. Scope values are hashed before they reach a store or a log.

Keys are not secrets: any caller may send anyone's key. So every strategy answers from what the
SDK itself validated (the access token of the *current* request, the session object the SDK
holds, the transport it positively identified), never from anything the client merely sent.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import getpass
import json
import os
import re
import socket
import uuid
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ScopeUnavailableError

__all__ = [
    "AuthInfo",
    "AuthorizeFn",
    "CallContext",
    "Scope",
    "by_auth_subject",
    "by_client_id",
    "local_transport",
    "local_user",
    "per_session",
    "scope",
    "shared",
]

Transport = Literal["stdio", "memory", "http", "unknown"]
LocalTransport = Literal["stdio", "memory"]

TRANSPORTS: tuple[str, ...] = ("HTTP", "stdio")
"""The transports a scope is described for (`Scope.on`): "HTTP" (streamable HTTP, SSE) and
"stdio" (also in-memory connections, which `by_auth_subject` treats alike)."""


@dataclass(frozen=True)
class AuthInfo:
    """The validated caller of the *current* request, as the SDK's token verifier reported it.

    Attributes:
        issuer: the token's `iss` claim, else the server's configured `issuer_url`.
        subject: the token's subject (`AccessToken.subject`, else its `sub` claim); None when
            the verifier gave none (always on mcp < 1.30, whose `AccessToken` has no subject).
        client_id: the OAuth client (an application, not a user).
        scopes: the OAuth scopes the token grants, for `authorize=` checks.
        token: the SDK's own `AccessToken` object, for anything else a check needs.
    """

    issuer: str | None = None
    subject: str | None = None
    client_id: str | None = None
    scopes: tuple[str, ...] = ()
    token: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class CallContext:
    """What an SDK adapter tells the engine about the request: transport-free and typed.

    Attributes:
        transport: "http" when the SDK handed over an HTTP request (streamable HTTP, SSE);
            "stdio" or "memory" only when positively identified (see `local_transport`);
            "unknown" otherwise (e.g. the mcp 1.x WebSocket transport, custom transports).
        auth: the validated caller of this request, None without an access token.
        session_id: an opaque id of the session object the SDK itself holds for this
            connection (one that completed the MCP handshake); None where the SDK has none
            (stateless HTTP, the 2026-07-28 era). Never a value read from a header.
        tool, arguments: the `tools/call` being decided, for `authorize=` checks.
        raw: the SDK's own request context, for user-written functions that need more.
    """

    transport: Transport = "unknown"
    auth: AuthInfo | None = None
    session_id: str | None = None
    tool: str | None = None
    arguments: Mapping[str, Any] | None = field(default=None, compare=False)
    raw: Any = field(default=None, compare=False, repr=False)


ScopeFn = Callable[[CallContext], str]
AuthorizeFn = Callable[[CallContext], "Awaitable[bool | None] | bool | None"]
"""`check(context)`, sync or async: return to allow the keyed call, raise (or return False)
to refuse it."""


class Scope:
    """A named scope strategy; combine with `|` (fallback) and `&` (both).

    A user-written strategy's value is namespaced (`["custom", value]`) so that it can never
    equal a built-in strategy's value, whatever string it returns.
    """

    def __init__(
        self,
        fn: ScopeFn,
        description: str,
        *,
        _builtin: bool = False,
        name: str | None = None,
        on: Mapping[str, str | None] | None = None,
        kind: str = "custom",
    ) -> None:
        self._fn = fn
        self._builtin = _builtin
        # Only built-in strategies are probed at start-up (`scope_fit`): a user's own may
        # have effects or need a real request.
        self._probeable = _builtin and kind != "composite"
        self.description = description
        self.kind = kind
        """A short machine name for what the scope is keyed on, published in `tools/list`
        metadata: "auth_subject", "client_id", "session", "shared", "local_user", "custom"
        (a strategy of your own) or "composite" (built with `|` or `&`)."""
        self.name = name or description
        """Short, for tables: the strategy's Python name for built-ins, else the description."""
        # The same strategy means different callers on different transports (by_auth_subject is
        # the token's subject over HTTP, the OS user on stdio): generated docs say both.
        given = on or {}
        self.on: dict[str, str | None] = {t: given.get(t, description) for t in TRANSPORTS}
        """What the scope is on each of `TRANSPORTS`, in words (the description by default);
        None where it never answers, so every keyed call there is refused."""

    def __call__(self, ctx: CallContext) -> str:
        value = self._fn(ctx)
        if self._builtin:
            return value
        if not isinstance(value, str) or not value:
            raise ScopeUnavailableError(
                f"the scope strategy {self.description!r} returned no scope"
            )
        return json.dumps(["custom", value])

    def __or__(self, other: Scope | ScopeFn) -> Scope:
        second = _as_scope(other)

        def first_available(ctx: CallContext) -> str:
            try:
                return self(ctx)
            except ScopeUnavailableError:
                return second(ctx)

        combined = Scope(
            first_available,
            f"{self.description}, else {second.description}",
            _builtin=True,
            kind="composite",
            name=_combined(self, "|", second, f"{self.description}, else {second.description}"),
            on={t: _either(self.on[t], second.on[t]) for t in TRANSPORTS},
        )
        combined._probeable = self._probeable and second._probeable
        return combined

    def __and__(self, other: Scope | ScopeFn) -> Scope:
        second = _as_scope(other)

        def both(ctx: CallContext) -> str:
            # JSON, not a separator: no pair of values can spell another pair.
            return json.dumps(["both", self(ctx), second(ctx)])

        combined = Scope(
            both,
            f"{self.description} and {second.description}",
            _builtin=True,
            kind="composite",
            name=_combined(self, "&", second, f"{self.description} and {second.description}"),
            on={t: _both(self.on[t], second.on[t]) for t in TRANSPORTS},
        )
        combined._probeable = self._probeable and second._probeable
        return combined

    def __repr__(self) -> str:
        return f"Scope({self.description!r})"


_NAMES = re.compile(r"[A-Za-z_]\w*(?: [|&] [A-Za-z_]\w*)*")


def _combined(first: Scope, operator: str, second: Scope, description: str) -> str:
    """`by_auth_subject | per_session` for strategies with names, else the words: a custom
    description may itself hold `|`, and would read as a combination that is not one."""
    if _NAMES.fullmatch(first.name) and _NAMES.fullmatch(second.name):
        return f"{first.name} {operator} {second.name}"
    return description


def _either(first: str | None, second: str | None) -> str | None:
    if first is None or second is None:
        return first or second
    return f"{first}; else {second}"


def _both(first: str | None, second: str | None) -> str | None:
    return None if first is None or second is None else f"{first}, and {second}"


def scope(description: str) -> Callable[[ScopeFn], Scope]:
    """Decorator for your own strategy: `@scope("per tenant")` over `def f(ctx) -> str`.

    Raise `ScopeUnavailableError` when the request carries no answer: idemtools then refuses
    the keyed call instead of guessing a shared namespace. Derive the value from what the SDK
    validated (the token in `ctx.auth`), not from what the client sent: keys are not secrets.
    """

    def wrap(fn: ScopeFn) -> Scope:
        return Scope(fn, description)

    return wrap


def _as_scope(value: Scope | ScopeFn) -> Scope:
    if isinstance(value, Scope):
        return value
    if not callable(value):
        # Refused where it is written: found only when a keyed call first computes its scope,
        # every such call would be refused in production.
        raise TypeError(
            f"scope must be a Scope (idemtools.by_auth_subject, by_client_id, per_session, "
            f"shared, local_user) or a function (CallContext) -> str, got {value!r} "
            f"({type(value).__name__}); e.g. scope=idemtools.shared, not scope='shared'"
        )
    return Scope(value, getattr(value, "__name__", "custom scope"))


_KINDS = {
    "by_auth_subject": "auth_subject",
    "by_client_id": "client_id",
    "per_session": "session",
    "shared": "shared",
    "local_user": "local_user",
}


def _builtin(
    description: str, *, http: str | None, stdio: str | None
) -> Callable[[ScopeFn], Scope]:
    def wrap(fn: ScopeFn) -> Scope:
        return Scope(
            fn,
            description,
            _builtin=True,
            name=fn.__name__,
            kind=_KINDS[fn.__name__],
            on={"HTTP": http, "stdio": stdio},
        )

    return wrap


# -- positively identified local transports ---------------------------------------------------

_LOCAL: contextvars.ContextVar[LocalTransport | None] = contextvars.ContextVar(
    "idemtools_local_transport", default=None
)


@contextlib.contextmanager
def local_transport(kind: LocalTransport) -> Iterator[None]:
    """Declare that the MCP connections started inside this block are local (stdio, in-memory).

    Why: "no HTTP request behind a call" does not mean "local" (the mcp 1.x WebSocket transport
    carries none either), so `by_auth_subject` gives the local user's scope only on a transport
    identified positively. idemtools does this itself for `FastMCP.run_stdio_async` /
    `MCPServer.run_stdio_async` (and so `server.run("stdio")`), mcp 2.x's in-process `Client`
    (both modes) and mcp 1.x's `create_connected_server_and_client_session`. Code that drives
    the low-level `server.run()` itself declares it around that call:

        async with stdio_server() as (read, write):
            with idemtools.local_transport("stdio"):
                await server.run(read, write, options)

    Declared around a low-level `server.run()` that names no store, "stdio" also gives it the
    stdio default store (docs/stores.md, "The default store"). Never wrap a network transport
    in it: every remote caller would share one scope.
    """
    if kind not in ("stdio", "memory"):
        raise ValueError(f"local_transport takes 'stdio' or 'memory', got {kind!r}")
    token = _LOCAL.set(kind)
    try:
        yield
    finally:
        _LOCAL.reset(token)


def declared_local_transport() -> LocalTransport | None:
    """The local transport declared for the current task, if any (adapters read this)."""
    return _LOCAL.get()


# -- the SDK's own sessions -------------------------------------------------------------------

_SESSION_IDS: dict[int, tuple[weakref.ref[Any], str]] = {}
"""id(session object) → (a weak reference to it, its id); the entry goes when the object does.

Keyed by `id()`, not a `WeakKeyDictionary`: that builds a weak reference on every lookup, and
every keyed call looks one up. The reference is checked, so an entry whose object is gone is
never another object's."""


def _forget_session(ref: weakref.ref[Any], key: int, table: dict[int, Any] = _SESSION_IDS) -> None:
    # A weak reference's callback: bound to its table, not to module globals, which
    # interpreter exit may clear before it runs.
    entry = table.get(key)
    if entry is not None and entry[0] is ref:
        del table[key]


def sdk_session_id(session: object) -> str:
    """An opaque, random id for one SDK session object, stable while the object lives.

    Adapters call this with the object the SDK holds for a connection (mcp 1.x
    `ServerSession`, mcp 2.x `Connection`); no client-sent value goes into it.
    """
    key = id(session)
    try:
        ref, found = _SESSION_IDS[key]
    except KeyError:
        pass
    else:
        if ref() is session:
            return found
    # First sight (or a dead entry under a reused id): a new id, whose entry the callback
    # drops when the object is collected.
    forget = functools.partial(_forget_session, key=key)
    new = (weakref.ref(session, forget), uuid.uuid4().hex)
    entry = _SESSION_IDS.setdefault(key, new)
    if entry[0]() is not session:  # a dead entry was there: replace it
        _SESSION_IDS[key] = entry = new
    return entry[1]


# -- the strategies ---------------------------------------------------------------------------

_SHARED = json.dumps(["shared"])


@functools.lru_cache(maxsize=4096)
def _tagged(tag: str, *parts: str | None) -> str:
    # A server sees few distinct callers at a time: their scope values are remembered rather
    # than encoded as JSON on every keyed call (bounded; the values are small).
    return json.dumps([tag, *parts])


@functools.cache
def _local_identity() -> str:  # constant for the process; the lookup costs a passwd read
    try:
        user = getpass.getuser()
    except Exception:  # no login name (containers): the uid still names the boundary
        user = "?"
    uid = os.getuid() if hasattr(os, "getuid") else -1
    return json.dumps(["local", socket.gethostname(), uid, user])


_LOCAL_USER = "the local OS user who started the server process"


@_builtin(
    "the local user who started the server process",
    http=f"{_LOCAL_USER}: every HTTP caller shares it",
    stdio=_LOCAL_USER,
)
def local_user(ctx: CallContext) -> str:
    """The OS user running this server: the boundary of a stdio or in-process server."""
    return _local_identity()


@_builtin(
    "per authenticated subject (token issuer + subject; the local user on stdio)",
    http="per authenticated subject (token issuer + subject; needs an access token)",
    stdio=_LOCAL_USER,
)
def by_auth_subject(ctx: CallContext) -> str:
    """The authenticated caller of the current request: the token's issuer and subject.

    Never the client id: a client id names an application, and all of its users would share
    one namespace. A token without a subject is refused (choose `by_client_id` if each client
    of yours is one principal). On a positively identified stdio or in-memory transport, the
    local user who started the server. Anything else (HTTP without a token, an unknown
    transport such as the mcp 1.x WebSocket) is refused, never pooled.
    """
    auth = ctx.auth
    if auth is not None:
        if auth.subject:
            return _tagged("sub", auth.issuer, auth.subject)
        raise ScopeUnavailableError(
            "this tool deduplicates per authenticated subject, and the request's access token "
            "carries no subject (the token verifier left AccessToken.subject unset; mcp "
            "releases before 1.30 have no such field). Make the verifier set the subject, or "
            "give the tool scope=by_client_id if each OAuth client is its own principal"
        )
    if ctx.transport in ("stdio", "memory"):
        return _local_identity()
    if ctx.transport == "http":
        raise ScopeUnavailableError(
            "this tool deduplicates per authenticated caller, and the request carries no "
            "validated access token; configure a token verifier, or call without a key"
        )
    raise ScopeUnavailableError(
        "this tool deduplicates per authenticated caller, and the request arrived on a "
        "transport idemtools cannot identify (no access token, not a declared local "
        "transport); choose a scope that works there (e.g. per_session), or declare a local "
        "transport with idemtools.local_transport()"
    )


@_builtin(
    "per OAuth client (token issuer + client id; explicit opt-in)",
    http="per OAuth client (token issuer + client id; its users share it)",
    stdio=None,  # no access token on stdio
)
def by_client_id(ctx: CallContext) -> str:
    """The OAuth client of the current request's token: for deployments where each client is
    its own principal (machine-to-machine). Every user of one client app shares its scope."""
    auth = ctx.auth
    if auth is not None and auth.client_id:
        return _tagged("client", auth.issuer, auth.client_id)
    raise ScopeUnavailableError(
        "this tool deduplicates per OAuth client, and the request carries no validated access "
        "token with a client id"
    )


@_builtin(
    "per session (the session the SDK holds)",
    http="per MCP session and its caller (not on stateless HTTP)",
    stdio="per connection (on stdio: the one client that started the server)",
)
def per_session(ctx: CallContext) -> str:
    """The session the SDK itself holds for this connection, never a client-sent header.

    Unavailable where the SDK has no session: stateless HTTP and the 2026-07-28 era.
    """
    if ctx.session_id:
        auth = ctx.auth
        if auth is None:
            return _tagged("session", ctx.session_id)
        # Also the caller of this request: mcp 1.21-1.29 route another principal who presents
        # a session id into that session, and that caller must not share its records.
        return _tagged("session", ctx.session_id, auth.issuer, auth.subject, auth.client_id)
    raise ScopeUnavailableError(
        "this tool deduplicates per session, and the SDK holds no session for this request "
        "(stateless HTTP or the 2026-07-28 protocol era); choose another scope"
    )


@_builtin(
    "one scope shared by every caller (explicit opt-in)",
    http="one scope shared by every caller",
    stdio="one scope shared by every caller",
)
def shared(ctx: CallContext) -> str:
    """Every caller shares one namespace: only for single-tenant servers that choose it."""
    return _SHARED
