"""Placeholder replaced by the SQLite store."""

from __future__ import annotations

__all__ = ["SQLiteStore"]


class SQLiteStore:  # pragma: no cover - replaced in the next commit
    kind = "sqlite"
