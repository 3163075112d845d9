"""`from_url`: a store from a URL, so operators choose it in configuration, not code.

In a module of its own, not in the package's `__init__`, so that `stores/default.py` (and any
other module of the package) imports it from where it is written.
"""

from __future__ import annotations

from typing import Any

from ..redaction import password_needs_encoding, redact_url, secrets_in, withhold
from ._url_options import InvalidStoreURLError, leftover, take, unknown
from .base import Store
from .memory import MemoryStore
from .sqlite import SQLiteStore

__all__ = ["from_url"]


def from_url(url: str, **options: Any) -> Store:
    """Build a store from a URL, so operators choose it in configuration, not code.

    `memory://` (the default embedded store), `sqlite:///path/to/file.db` (the path is
    everything between `sqlite://` and `?`, as written: three slashes absolute, two relative,
    unlike SQLAlchemy; see docs/stores.md, "`sqlite:` URLs"),
    `redis://host:port/db` (also `rediss://`, `unix://`; `redis+cluster://host:port` for a Redis
    Cluster, any one node), `postgresql://user@host/db` (its schema
    must exist: see `PostgresStore.create_schema`). idemtools' own settings ride in the
    query, so one environment variable configures a deployment: every option of the store's
    constructor and `from_url` that makes sense as text (`?prefix=app:` for redis,
    `?max_records_per_scope=none`, `?timeout=2s`; the table in docs/stores.md, "Options in a
    store URL"), typed here. What idemtools does not take goes to the driver (redis-py,
    libpq), which is asked now: an option neither takes is refused here, by name, not at
    the first keyed call.
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


def _from_url(url: str, **options: Any) -> Store:
    scheme, sep, _ = url.partition("://")
    if not sep:
        raise InvalidStoreURLError(
            f"not a store URL: {redact_url(url)!r} (expected e.g. memory://, sqlite:///x.db)"
        )
    scheme = scheme.lower()
    if scheme in ("memory", "sqlite"):
        url, found = take(url, scheme)
        for name, value in found.items():
            options.setdefault(name, value)
        for name in leftover(url):  # no driver to hand it to
            raise unknown(scheme, name)
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

        url, found = take(url, "redis")
        for name, value in found.items():  # keywords win over the query
            options.setdefault(name, value)
        return RedisStore.from_url(url, **options)  # it asks redis-py about the rest now
    if scheme in ("postgres", "postgresql"):
        from .postgres import PostgresStore

        url, found = take(url, "postgres")
        for name, value in found.items():
            options.setdefault(name, value)
        return PostgresStore.from_url(url, **options)  # it asks libpq about the rest now
    raise InvalidStoreURLError(f"unknown store scheme {scheme!r} in {redact_url(url)!r}")
