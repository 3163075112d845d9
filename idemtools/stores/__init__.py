"""Stores keep idempotency records behind one async protocol (`idemtools.stores.base.Store`).

`MemoryStore` and `SQLiteStore` need nothing beyond the standard library and cachetools.
`RedisStore` and `PostgresStore` are imported on first use, so their drivers stay optional
extras (`idemtools[redis]`, `idemtools[postgres]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def from_url(url: str, **options: Any) -> Store:
    """Build a store from a URL, so operators choose it in configuration, not code.

    `memory://` (the default embedded store), `sqlite:///path/to/file.db`,
    `redis://host:port/db` (also `rediss://`), `postgresql://user@host/db` (its schema must
    exist: see `PostgresStore.create_schema`). Keyword options go to the store's constructor.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a store URL: {url!r} (expected e.g. memory://, sqlite:///x.db)")
    scheme = scheme.lower()
    if scheme == "memory":
        return MemoryStore(**options)
    if scheme == "sqlite":
        if not rest:
            raise ValueError("sqlite:// needs a path, e.g. sqlite:///var/lib/app/idem.db")
        return SQLiteStore(rest, **options)
    if scheme in ("redis", "rediss", "unix"):
        from .redis import RedisStore

        return RedisStore.from_url(url, **options)
    if scheme in ("postgres", "postgresql"):
        from .postgres import PostgresStore

        return PostgresStore.from_url(url, **options)
    raise ValueError(f"unknown store scheme {scheme!r} in {url!r}")
