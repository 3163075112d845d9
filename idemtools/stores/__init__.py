"""Stores keep idempotency records behind one async protocol (`idemtools.stores.base.Store`).

`MemoryStore` and `SQLiteStore` need nothing beyond the standard library.
`RedisStore` and `PostgresStore` are imported on first use, so their drivers stay optional
extras (`idemtools[redis]`, `idemtools[postgres]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._url_options import InvalidStoreURLError as InvalidStoreURLError
from .base import Claim, Record, Status, Store
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .urls import from_url

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
