"""Stores keep idempotency records behind one async protocol (`idemtools.stores.base.Store`).

`MemoryStore` and `SQLiteStore` need nothing beyond the standard library.
`RedisStore` and `PostgresStore` are imported on first use, so their drivers stay optional
extras (`idemtools[redis]`, `idemtools[postgres]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..redaction import password_needs_encoding, redact_url, secrets_in, withhold
from .base import Claim, Record, Status, Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .redis import RedisStore

__all__ = [
    "Claim",
    "MemoryStore",
    "PostgresStore",
    "Record",
    "RedisStore",
    "SQLiteStore",
    "Status",
    "Store",
    "from_url",
]


def __getattr__(name: str) -> Any:
    # Lazy: importing idemtools.stores must not require redis or psycopg.
    if name == "RedisStore":
        from .redis import RedisStore

        return RedisStore
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _take(url: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """Remove idemtools' own query parameters from a URL; the rest belong to the driver."""
    parts = urlsplit(url)
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in names:
            ours[name] = value
        else:
            rest.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), ours


_QUOTA = "max_records_per_scope"
_RECHECK = "policy_recheck"
_SHARE = "max_bytes_per_scope"


def _int(name: str, value: str) -> int:
    """A query option's integer; the error names the option, never echoes the whole URL
    (it may hold a password)."""
    try:
        return int(value.replace("_", ""))
    except ValueError:
        raise InvalidStoreURLError(
            f"store URL option {name}= must be an integer, got {value!r}"
        ) from None


def _float(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidStoreURLError(
            f"store URL option {name}= must be a number, got {value!r}"
        ) from None


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise InvalidStoreURLError(f"?{name}= takes true or false, got {value!r}")


def from_url(url: str, **options: Any) -> Store:
    """Build a store from a URL, so operators choose it in configuration, not code.

    `memory://` (the default embedded store), `sqlite:///path/to/file.db` (the path is
    everything between `sqlite://` and `?`, as written: three slashes absolute, two relative,
    unlike SQLAlchemy; see docs/stores.md, "`sqlite:` URLs"),
    `redis://host:port/db` (also `rediss://`, `unix://`; `redis+cluster://host:port` for a Redis
    Cluster, any one node), `postgresql://user@host/db` (its schema
    must exist: see `PostgresStore.create_schema`). idemtools' own settings may ride in the
    query, so one environment variable configures a deployment: `?max_records=` (memory,
    sqlite), `?max_bytes=` (memory, sqlite, postgres), `?max_records_per_scope=` (every
    store: the per-caller quota) and `?max_bytes_per_scope=` (memory, sqlite; `none` turns
    either off where it is on by default), `?prefix=` (redis: several servers sharing one Redis),
    `?allow_eviction=true` (redis: serve keyed calls although its `maxmemory-policy` may
    evict records), `?policy_recheck=S` (redis: seconds between reads of that policy),
    `?wait_replicas=N&wait_timeout=S` (redis: WAIT for N replicas after each claim and
    completion), `?table=`
    (postgres).
    Keyword options go to the store's constructor and win over the query.

    Errors show the URL with its password replaced by `***`, and a driver's complaint about a
    URL that holds a credential is withheld when its text quotes the credential.
    Write a password percent-encoded: `urllib.parse.quote(password, safe="")`.
    """
    try:
        return _from_url(url, **options)
    except InvalidStoreURLError as exc:
        shown = withhold(str(exc), url)
        if shown == str(exc) and not secrets_in(url):
            raise
        error = InvalidStoreURLError(
            str(exc) if shown == str(exc) else f"store URL {redact_url(url)} was refused: {shown}"
        )
    except Exception as exc:
        if not secrets_in(url):
            raise
        error = InvalidStoreURLError(
            f"store URL {redact_url(url)} was refused: {type(exc).__name__}: "
            f"{withhold(str(exc), url)}"
        )
    # Raised here, outside the handler: neither chained nor with a __context__, which a
    # traceback or an error tracker would print with the driver's own text.
    raise error


def _check_redis_url(url: str) -> None:
    """Build (not connect) one connection from the URL now: redis-py takes unknown query
    options as connection arguments and would fail on them at the first claim, in a log line
    quoting the URL's text."""
    from redis.asyncio import ConnectionPool

    ConnectionPool.from_url(url).make_connection()  # type: ignore[no-untyped-call]


class InvalidStoreURLError(ValueError):
    """A store URL that cannot be used (a ValueError); its message never holds a credential."""


def _from_url(url: str, **options: Any) -> Store:
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise InvalidStoreURLError(
            f"not a store URL: {redact_url(url)!r} (expected e.g. memory://, sqlite:///x.db)"
        )
    scheme = scheme.lower()
    if scheme in ("memory", "sqlite"):
        _, ours = _take(url, ("max_records", "max_bytes", _QUOTA, _SHARE))
        for name in ("max_records", "max_bytes", _QUOTA, _SHARE):
            if name in ours:
                # The per-scope bounds are on by default: `none` turns one off.
                off = name in (_QUOTA, _SHARE) and ours[name].strip().lower() == "none"
                options.setdefault(name, None if off else _int(name, ours[name]))
        if scheme == "memory":
            return MemoryStore(**options)
        path = url.split("?", 1)[0][len("sqlite://") :]  # sqlite:///abs.db or sqlite://rel.db
        if not path:
            raise InvalidStoreURLError("sqlite:// needs a path, e.g. sqlite:///var/lib/app/idem.db")
        return SQLiteStore(path, **options)
    if password_needs_encoding(url):
        raise InvalidStoreURLError(
            f"the password in store URL {redact_url(url)} holds a character that must be "
            "percent-encoded (/, ?, #, %, or a space): write it as urllib.parse.quote(password, "
            'safe=""). (A URL without a password but with an "@" in its path or query: write '
            'that "@" as %40.)'
        )
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        from .redis import RedisStore

        names = ("prefix", _QUOTA, "allow_eviction", "wait_replicas", "wait_timeout", _RECHECK)
        clean, ours = _take(url, names)
        if "prefix" in ours:
            options.setdefault("prefix", ours["prefix"])
        for name in (_QUOTA, "wait_replicas"):
            if name in ours:
                options.setdefault(name, _int(name, ours[name]))
        if "wait_timeout" in ours:
            options.setdefault("wait_timeout", _float("wait_timeout", ours["wait_timeout"]))
        if _RECHECK in ours:
            options.setdefault(_RECHECK, _float(_RECHECK, ours[_RECHECK]))
        if "allow_eviction" in ours:
            options.setdefault("allow_eviction", _flag("allow_eviction", ours["allow_eviction"]))
        if "cluster" not in scheme:
            _check_redis_url(clean)
        return RedisStore.from_url(clean, **options)
    if scheme in ("postgres", "postgresql"):
        from .postgres import PostgresStore

        clean, ours = _take(url, ("table", _QUOTA, "max_bytes"))
        if "table" in ours:
            options.setdefault("table", ours["table"])
        for name in (_QUOTA, "max_bytes"):
            if name in ours:
                options.setdefault(name, _int(name, ours[name]))
        from psycopg.conninfo import conninfo_to_dict

        conninfo_to_dict(clean)  # now, where its complaint is redacted; not at the first claim
        return PostgresStore.from_url(clean, **options)
    raise InvalidStoreURLError(f"unknown store scheme {scheme!r} in {redact_url(url)!r}")
