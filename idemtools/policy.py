"""Per-tool policy, the `@idempotent` decorator and the registry that remembers them.

`@idempotent` changes nothing about the function: it returns the very same object, so its
signature, sync/async nature and the input schema an SDK builds from it are untouched, in
whichever order it is stacked with `@server.tool()`. It records a `Policy` on the function itself
(`__idemtools_policy__`), which is where the adapters of FastMCP and MCPServer find it (they hold
the tool's function), and in a registry by tool name, which is all a low-level `Server` has: its
tools are its handler's code, so only a name connects a call to a policy.

A name in that registry belongs to one function. Decorating a second function under a name
already registered with a different policy raises `PolicyConflictError`, naming both, when the
name is the registry's to resolve: given as `name=`, or in an explicit `registry=`. A bare
`@idempotent` in the process-wide registry keys its entry by the function's own name only as a
fallback; two servers with a same-named tool each find their own policy on the function.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import re
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal, TypeVar, overload

from . import bridges
from .errors import UnauthorizedError
from .outcome import Outcome
from .scopes import AuthorizeFn, CallContext, Scope, ScopeFn, _as_scope, by_auth_subject

__all__ = [
    "DEFAULT_MAX_RUNTIME",
    "DEFAULT_POLICY",
    "DEFAULT_RECONCILE_TIMEOUT",
    "TOOL_META_KEY",
    "LapsedCall",
    "OnLapse",
    "Policy",
    "PolicyConflictError",
    "Reconcile",
    "Registry",
    "authorize_call",
    "default_registry",
    "idempotent",
    "policy_of",
    "tool_metadata",
]

log = logging.getLogger("idemtools")

F = TypeVar("F", bound=Callable[..., Any])

_ATTR = "__idemtools_policy__"


_DURATION_TYPES = "a datetime.timedelta or a number of seconds (int or float)"


def _seconds(value: object, what: str) -> float:
    """A duration option as seconds; the error names the option and what it accepts.

    Why by hand: `float(value)` accepted `"60"` and answered `"24h"` with "could not convert
    string to float", and `None` with a bare TypeError, none of which says which option.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
    else:
        hint = (
            "; strings are not parsed: write e.g. timedelta(hours=24) or 86400"
            if isinstance(value, str)
            else ""
        )
        raise TypeError(
            f"{what} must be {_DURATION_TYPES}, got {value!r} ({type(value).__name__}){hint}"
        )
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(
            f"{what} must be a positive, finite duration ({_DURATION_TYPES}), got {value!r}"
        )
    return seconds


def _optional_seconds(value: object, what: str) -> float | None:
    """`_seconds`, where None means "no limit"."""
    if value is None:
        return None
    try:
        return _seconds(value, what)
    except TypeError:
        raise TypeError(
            f"{what} must be {_DURATION_TYPES} or None, got {value!r} ({type(value).__name__})"
        ) from None


def _checked_key_from(names: object) -> tuple[str, ...]:
    """`key_from` as a tuple of names; a lone string is refused (it would iterate letters)."""
    if names is None:
        return ()
    if isinstance(names, str) or not isinstance(names, (tuple, list)):
        raise TypeError(
            f"key_from must be a tuple of argument names, e.g. key_from=({names!r},), got {names!r}"
        )
    if not names:
        raise ValueError(
            "key_from=() names no argument: give the arguments that identify one operation, "
            'e.g. key_from=("order_id", "amount"). There is no "all arguments" default: two '
            "genuinely equal operations would collapse into one"
        )
    return tuple(names)


def _check_bridges(policy: Policy) -> None:
    """Refuse a bridge declaration that cannot mean one thing, when it is made."""
    argument, names = policy.key_argument, policy.key_from
    if argument is not None and (not isinstance(argument, str) or not argument):
        raise TypeError(f"key_argument must be a non-empty argument name, got {argument!r}")
    if policy.key_header and argument is None:
        raise TypeError("key_header=True annotates the key argument: give key_argument= too")
    if policy.key_header and not _TOKEN.fullmatch(bridges.header_token(argument or "")):
        raise ValueError(
            f"key_header=True: key_argument {argument!r} makes no HTTP header name "
            f"({bridges.header_token(argument or '')!r})"
        )
    if not isinstance(names, tuple) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f"key_from must be a tuple of non-empty argument names, got {names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"key_from names an argument twice: {names!r}")
    if argument is not None and names:
        raise TypeError(
            "key_argument and key_from are two different bridges: give one. A key that is "
            "sometimes the model's and sometimes derived would differ between a first "
            "attempt and its retry, which is the double execution the bridge exists to stop"
        )


_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


DEFAULT_MAX_RUNTIME = 3600.0
"""One hour: far beyond what any interactive client waits for a tool call, so no call a
client still waits on reaches it, while a hung tool frees its key within the hour (plus one
lease) without a restart. A second execution is worse than a stuck key, and a stuck key can
be released at once from the CLI (`idemtools keys release`); hence long, not short."""


DEFAULT_RECONCILE_TIMEOUT = 10.0
"""Seconds a `reconcile` may take before its retry is answered `idempotency_outcome_unknown`
(not recorded: a later retry reconciles again)."""


@dataclass(frozen=True)
class LapsedCall:
    """What a `reconcile` function is told about a call whose earlier execution vanished.

    An earlier execution of this very call (same tool, same arguments, same key) claimed the
    key, and its claim lapsed without an outcome: its process died, or it stopped renewing.
    It may or may not have reached its side effect. `reconcile` finds out by reading (the
    provider's lookup by idempotency key, the application's own table), never by acting.

    Attributes:
        tool: the tool's name.
        arguments: the call's arguments, as the client sent them (read-only by convention).
        key: the idempotency key (the client's, or the one a bridge derived).
        scope: the store scope the record lives in (an opaque digest; for logs and lookups
            keyed by it, not for display).
        claimed_at: when the lapsed claim was taken (epoch seconds, the store's clock).
        lapsed_at: when its lease ran out (epoch seconds, the store's clock).
    """

    tool: str
    arguments: Any
    key: str
    scope: str
    claimed_at: float | None
    lapsed_at: float | None

    @property
    def held_for(self) -> float | None:
        """Seconds the lapsed claim was held before it lapsed (None when a time is unknown)."""
        if self.claimed_at is None or self.lapsed_at is None:
            return None
        return max(0.0, self.lapsed_at - self.claimed_at)


Reconcile = Callable[[LapsedCall], Outcome | Awaitable[Outcome | None] | None]
"""`reconcile(call) -> Outcome | None`, sync or async: see `Policy.on_lapse`."""

OnLapse = Literal["rerun", "refuse"] | Reconcile
"""What a retry does when it finds a lapsed claim: `"rerun"`, `"refuse"` or a reconcile."""


def _checked_on_lapse(value: object) -> OnLapse:
    if value in ("rerun", "refuse") or (callable(value) and not isinstance(value, str)):
        return value
    raise ValueError(f'on_lapse must be "rerun", "refuse" or a reconcile function, got {value!r}')


@dataclass(frozen=True)
class Policy:
    """How keyed calls to one tool are deduplicated.

    Attributes:
        retention: how long a completed outcome is replayed; after that the key is new again.
            Published in the generated retention documentation (SEP, "Retention").
        lease: how long an in-progress claim lives without renewal. While the tool runs the
            claim is renewed; if the process dies, the claim lapses after this, and the retry
            that finds it does what `on_lapse` says.
        max_runtime: how long a running call may run before its outcome is declared unknown
            (seconds; None: for as long as it runs). Past it, with an ERROR naming the tool and
            key digest, `idempotency_outcome_unknown` is recorded under the running call's
            owner, so a tool that never returns (a deadlock, an elicitation to a client that
            has gone) does not hold its key for ever, and it never runs twice: retries get
            that answer and the client decides with a new key. If the tool does end later,
            its real outcome replaces the unknown one. Default `DEFAULT_MAX_RUNTIME` (one hour).
        on_lapse: what a retry does when it finds a lapsed claim, left by an execution whose
            process died mid-tool (it may have acted; its end was never recorded).
            `"rerun"` (default, SEP-3182's stated limit): run the tool again, logged at ERROR
            and counted (`EngineStats.lapsed_reruns`, `idemtools.lapsed_claims`).
            `"refuse"`: record and answer `idempotency_outcome_unknown`; the key never runs
            again. A reconcile function `reconcile(call: LapsedCall) -> Outcome | None`,
            sync or async: the retry takes the claim over (concurrent retries get
            `idempotency_key_in_progress`), then asks it; an `Outcome` is recorded and
            answered, `None` runs the tool. A reconcile that raises or exceeds
            `reconcile_timeout` is answered `idempotency_outcome_unknown`, unrecorded: the
            claim lapses again and a later retry reconciles again. It must only read; see
            docs/operations.md, "When the outcome is unknown".
        reconcile_timeout: seconds a reconcile function may take (default 10). A sync
            reconcile runs in a worker thread, so this bounds it even while it blocks (its
            late answer is discarded); an async one runs on the event loop and is bounded
            only where it awaits.
        scope: whose records a key can match (see `idemtools.scopes`).
        name: the tool's registry name, when it should not follow the function name.
        transactional: run the tool inside the store's transaction (PostgresStore), so its
            own writes to that database and the completed record commit or roll back
            together; closes the SEP's crash window for such tools.
        authorize: `check(context)`, sync or async, run before every replay and every
            execution of a keyed call; if it raises or returns anything but True or None, the
            call is refused with `idempotency_unauthorized` and no record is read or written.
            A tool that checks permissions inside its handler must declare that check here
            too: the handler does not run on a replay, so otherwise a caller whose permission
            was revoked still gets the recorded answer for the whole retention. None: the
            server-wide `install(authorize=...)`, if any.
        key_argument: the name of an optional string argument whose value is the key when
            the client sends no `idempotencyKey` (a bridge outside SEP-3182, see
            `idemtools.bridges`). Never part of the fingerprint.
        key_header: also annotate that argument with `x-mcp-header` (opt-in: mcp 2.3 refuses
            a call whose HTTP client did not mirror an annotated argument into its header).
        key_from: the names of the arguments a key is derived from when the client sends none
            (a bridge outside SEP-3182, see `idemtools.bridges`).
        passes_key_argument: the function asks for the key argument (its signature has it),
            so the tool receives it; set by `@idempotent`.
    """

    retention: float = 24 * 3600.0
    lease: float = 60.0
    scope: Scope = field(default=by_auth_subject)
    name: str | None = None
    transactional: bool = False
    authorize: AuthorizeFn | None = field(default=None, compare=False)
    max_runtime: float | None = DEFAULT_MAX_RUNTIME
    key_argument: str | None = None
    key_header: bool = False
    key_from: tuple[str, ...] = ()
    passes_key_argument: bool = False
    on_lapse: OnLapse = "rerun"
    reconcile_timeout: float = DEFAULT_RECONCILE_TIMEOUT

    @staticmethod
    def of(
        *,
        retention: timedelta | float = timedelta(hours=24),
        lease: timedelta | float = timedelta(seconds=60),
        scope: Scope | ScopeFn = by_auth_subject,
        name: str | None = None,
        transactional: bool = False,
        authorize: AuthorizeFn | None = None,
        max_runtime: timedelta | float | None = DEFAULT_MAX_RUNTIME,
        key_argument: str | None = None,
        key_header: bool = False,
        key_from: tuple[str, ...] | list[str] | None = None,
        on_lapse: OnLapse = "rerun",
        reconcile_timeout: timedelta | float = DEFAULT_RECONCILE_TIMEOUT,
    ) -> Policy:
        """Build a policy from friendly values (timedelta or seconds, plain scope functions)."""
        return Policy(
            retention=_seconds(retention, "retention"),
            lease=_seconds(lease, "lease"),
            scope=_as_scope(scope),
            name=name,
            transactional=transactional,
            authorize=_checked_authorize(authorize),
            max_runtime=_optional_seconds(max_runtime, "max_runtime"),
            key_argument=key_argument,
            key_header=key_header,
            key_from=_checked_key_from(key_from),
            on_lapse=on_lapse,
            reconcile_timeout=_seconds(reconcile_timeout, "reconcile_timeout"),
        )

    def __post_init__(self) -> None:
        # `Policy(retention="24h")` is refused here, naming the field, not when a store first
        # computes an expiry from it; a timedelta given directly is accepted and stored as seconds.
        object.__setattr__(self, "retention", _seconds(self.retention, "retention"))
        object.__setattr__(self, "lease", _seconds(self.lease, "lease"))
        object.__setattr__(self, "max_runtime", _optional_seconds(self.max_runtime, "max_runtime"))
        object.__setattr__(self, "scope", _as_scope(self.scope))
        object.__setattr__(self, "on_lapse", _checked_on_lapse(self.on_lapse))
        object.__setattr__(
            self, "reconcile_timeout", _seconds(self.reconcile_timeout, "reconcile_timeout")
        )
        _check_bridges(self)

    def with_name(self, name: str) -> Policy:
        return replace(self, name=name)


DEFAULT_POLICY = Policy()

TOOL_META_KEY = "io.github.idemtools/idempotency"
"""The `_meta` key of a tool's idempotency metadata in `tools/list` (opt-in, see `install`)."""


def tool_metadata(policy: Policy) -> dict[str, Any]:
    """What `tools/list` publishes for a tool under `_meta[TOOL_META_KEY]`, transport-free.

    Why: the SEP leaves per-tool idempotency metadata as future work, yet a client deciding
    at run time whether a retry is safe needs two facts: how long the server replays an answer
    (`retentionSeconds`, rounded down, so a client never relies on more than is kept) and
    whose records a key can match (`scope`, the `Scope.kind`: "auth_subject", "session",
    "shared", ...). Every adapter builds the value here, so all of them publish the same shape.
    """
    meta: dict[str, Any] = {
        "retentionSeconds": int(policy.retention),
        "scope": policy.scope.kind,
        "keySources": bridges.key_sources(policy),
    }
    if policy.key_argument is not None:
        meta["keyArgument"] = policy.key_argument
    if policy.key_from:
        meta["keyFrom"] = list(policy.key_from)
    return meta


def _checked_authorize(check: AuthorizeFn | None) -> AuthorizeFn | None:
    if check is not None and not callable(check):
        raise TypeError(f"authorize must be a callable of the request context, got {check!r}")
    return check


class PolicyConflictError(ValueError):
    """Two different functions declared different policies under one tool name.

    Raised when the second is decorated (at import), not when a call finds the wrong one: a
    name-keyed registry where the last declaration silently wins lets two servers in one process
    swap each other's retention and scope. The message names both functions (`module:qualname`).
    Re-decorating the same function (a re-import, a reload) or declaring an equal policy is fine.
    """


@dataclass(frozen=True)
class _Entry:
    policy: Policy
    origin: str | None
    """`module:qualname` of the decorated function; None: registered by `Registry.register`."""
    explicit: bool
    """The name is the registry's to resolve (`name=` or an explicit `registry=`), not just
    the function's own name recorded as a fallback in the process-wide registry."""


class Registry:
    """Tool name → policy, for servers that can only find a tool's policy by its name. Thread-safe.

    `register` replaces what a name held. `@idempotent` checks first: a different function
    under a name already registered with a different policy raises `PolicyConflictError`.
    """

    def __init__(self) -> None:
        self._policies: dict[str, Policy] = {}
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def register(self, name: str, policy: Policy) -> None:
        """Set `name`'s policy, replacing any earlier one (a deliberate, programmatic choice)."""
        self._put(name, policy.with_name(name), origin=None, explicit=True)

    def _declare(self, name: str, policy: Policy, *, origin: str, explicit: bool) -> None:
        """What `@idempotent` registers: refuses a second function with a different policy."""
        self._put(name, policy, origin=origin, explicit=explicit)

    def _put(self, name: str, policy: Policy, *, origin: str | None, explicit: bool) -> None:
        if policy.key_argument is not None or policy.key_from:
            bridges.BRIDGED.add(name)  # a hint only: the policy found at call time decides
        with self._lock:
            held = self._entries.get(name)
            if held is not None and origin is not None and held.origin != origin:
                if held.explicit and not explicit:
                    return  # a bare function's fallback entry never displaces a declared name
                if held.explicit and held.origin is not None and not _same(held.policy, policy):
                    raise PolicyConflictError(_conflict(name, held.origin, origin))
            self._entries[name] = _Entry(policy, origin, explicit)
            self._policies[name] = policy

    def get(self, name: str) -> Policy | None:
        return self._policies.get(name)

    def declared(self, name: str) -> Policy | None:
        """`name`'s policy if it was declared for that name (`name=`, an explicit `registry=`,
        `register`), not merely recorded under a bare function's own name.

        For servers that hold the tool's function: their policy is on it, and a bare function
        elsewhere in the process that happens to share the tool's name is no declaration.
        """
        entry = self._entries.get(name)
        if entry is None or not entry.explicit or self._policies.get(name) is not entry.policy:
            return None
        return entry.policy

    def __contains__(self, name: object) -> bool:
        return name in self._policies

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._policies))

    def __len__(self) -> int:
        return len(self._policies)

    def items(self) -> list[tuple[str, Policy]]:
        return sorted(self._policies.items())


def _same(first: Policy, second: Policy) -> bool:
    # `authorize` is left out of Policy equality; two checks are not the same policy here.
    return first == second and first.authorize is second.authorize


def _conflict(name: str, first: str | None, second: str) -> str:
    return (
        f"@idempotent: tool name {name!r} is already registered by {first} with a different "
        f"policy; {second} declares another. A name-keyed registry serves one policy per "
        "name: give one of them another name=, the same policy, or its own "
        "registry=Registry() per server"
    )


def _origin(func: object) -> str:
    """`module:qualname`: the same for a function re-created by a re-import or reload."""
    qualname = getattr(func, "__qualname__", None)
    module = getattr(func, "__module__", None)
    if isinstance(qualname, str) and isinstance(module, str):
        return f"{module}:{qualname}"
    return f"{type(func).__module__}:{type(func).__qualname__} object at {id(func):#x}"


default_registry = Registry()


def policy_of(fn: object) -> Policy | None:
    """The policy `@idempotent` attached to a function (or to what it wraps), if any."""
    seen = 0
    while fn is not None and seen < 16:
        policy = getattr(fn, _ATTR, None)
        if isinstance(policy, Policy):
            return policy
        fn = getattr(fn, "__wrapped__", None)
        seen += 1
    return None


@overload
def idempotent(fn: F, /) -> F: ...


@overload
def idempotent(
    *,
    retention: timedelta | float = ...,
    lease: timedelta | float = ...,
    scope: Scope | ScopeFn = ...,
    name: str | None = ...,
    registry: Registry | None = ...,
    transactional: bool = ...,
    authorize: AuthorizeFn | None = ...,
    max_runtime: timedelta | float | None = ...,
    key_argument: str | None = ...,
    key_header: bool = ...,
    key_from: tuple[str, ...] | list[str] | None = ...,
    on_lapse: OnLapse = ...,
    reconcile_timeout: timedelta | float = ...,
) -> Callable[[F], F]: ...


def idempotent(
    fn: Any = None,
    /,
    *,
    retention: timedelta | float = timedelta(hours=24),
    lease: timedelta | float = timedelta(seconds=60),
    scope: Scope | ScopeFn = by_auth_subject,
    name: str | None = None,
    registry: Registry | None = None,
    transactional: bool = False,
    authorize: AuthorizeFn | None = None,
    max_runtime: timedelta | float | None = DEFAULT_MAX_RUNTIME,
    key_argument: str | None = None,
    key_header: bool = False,
    key_from: tuple[str, ...] | list[str] | None = None,
    on_lapse: OnLapse = "rerun",
    reconcile_timeout: timedelta | float = DEFAULT_RECONCILE_TIMEOUT,
) -> Any:
    """Declare a tool's idempotency policy; returns the function itself, unchanged.

    Usable bare (`@idempotent`) or with options. The policy applies to keyed `tools/call`
    requests once `idemtools.install(server)` runs; calls without a key are never affected.
    Give `name=` when the tool is registered under a name other than the function's, so that
    a refactor does not silently change the tool's identity.

    Give `authorize=check` when the tool checks permissions in its handler: `check(context)`
    receives the same `CallContext` scope strategies get (`context.auth.scopes`, the raw token
    at `context.auth.token`) and runs before every replay and execution, because a replay
    never reaches the handler.

    `max_runtime` (default one hour; None: no limit) bounds how long a running call may run
    before retries are answered `idempotency_outcome_unknown`, so a tool that never returns
    does not hold its key for ever and never runs twice (see `Policy`).

    `on_lapse` decides what a retry does after a process died inside the tool: `"rerun"`
    (default), `"refuse"`, or a reconcile function that checks whether the side effect
    happened (see `Policy` and docs/operations.md, "When the outcome is unknown").

    Two opt-in bridges, outside SEP-3182, for clients that send no `idempotencyKey` (see
    `idemtools.bridges` and docs/bridges.md): `key_argument="idempotency_key"` adds an
    optional argument a model fills with one key per operation (the tool receives it only
    if its signature has that parameter); `key_from=("order_id", "amount")` derives the key
    from those arguments (two genuinely equal operations then collapse into one: keep the
    retention short). The SEP field wins over either when a client sends it.
    """
    policy = Policy.of(
        retention=retention,
        lease=lease,
        scope=scope,
        name=name,
        transactional=transactional,
        authorize=authorize,
        max_runtime=max_runtime,
        key_argument=key_argument,
        key_header=key_header,
        key_from=key_from,
        on_lapse=on_lapse,
        reconcile_timeout=reconcile_timeout,
    )
    target = registry if registry is not None else default_registry

    def decorate(func: F) -> F:
        tool_name = name or getattr(func, "__name__", None)
        if not tool_name:
            raise TypeError("@idempotent needs name= for a callable without __name__")
        named = policy.with_name(tool_name)
        if named.key_from:
            missing = bridges.missing_names(func, named.key_from)
            if missing:
                raise TypeError(
                    f"@idempotent(key_from=...): {tool_name!r} has no parameter "
                    f"{', '.join(map(repr, missing))}; a key derived from an argument the "
                    "tool never receives would make every call one operation"
                )
        if named.key_argument is not None and bridges.asks_for(func, named.key_argument):
            named = replace(named, passes_key_argument=True)
        # Checked before the function is touched: a refused declaration changes nothing.
        target._declare(
            tool_name,
            named,
            origin=_origin(func),
            explicit=name is not None or registry is not None,
        )
        setattr(func, _ATTR, named)
        return func

    if fn is not None:
        if not callable(fn):
            raise TypeError("@idempotent takes a function, or keyword options only")
        return decorate(fn)
    return decorate


async def authorize_call(check: AuthorizeFn, context: CallContext, key: str) -> None:
    """Run a tool's `authorize=` check; any exception it raises becomes `UnauthorizedError`.

    Only True and None allow. False refuses; so does any other answer (`0`, `""`, `[]`, a
    list of grants, an object), logged at ERROR naming the check and the type it returned: a
    check returning "the matching grants" must not fail open when there are none, and a
    truthy object is no more an answer than a falsy one (fail closed).

    The exception's message is logged here, never sent: it may name permissions, roles or
    other callers. Nothing about the key's record is read before this returns.
    """
    try:
        result = check(context)
        if inspect.isawaitable(result):
            result = await result
        if result is True or result is None:
            return
        if result is not False:
            log.error(
                "idempotency authorize check %s returned a %s, not True, None or False; the "
                "call is refused (fail closed): return True or None to allow, False or raise "
                "to refuse",
                _check_name(check),
                type(result).__name__,
            )
        raise PermissionError(f"the authorize check returned {type(result).__name__}")
    except Exception as exc:
        # The engine logs the refusal with the key's digest; the reason stays here.
        log.info("idempotency authorize check refused tool=%s: %r", context.tool, exc)
        raise UnauthorizedError(
            "this call is not authorized; no recorded answer was read or written", key=key
        ) from exc


def _check_name(check: object) -> str:
    name = getattr(check, "__qualname__", None) or getattr(check, "__name__", None)
    module = getattr(check, "__module__", None)
    if isinstance(name, str):
        return f"{module}.{name}" if isinstance(module, str) else name
    return repr(check)
