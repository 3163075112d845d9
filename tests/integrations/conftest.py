"""The in-process DBOS of the integration tests: a SQLite system database per test."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def dbos(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("dbos", reason="dbos is not installed")
    import sqlalchemy
    from dbos import DBOS

    def unixepoch(connection: Any, _record: Any) -> None:
        # DBOS's SQLite schema needs unixepoch('subsec') (SQLite 3.42); a stand-in before it.
        if isinstance(connection, sqlite3.Connection) and sqlite3.sqlite_version_info < (3, 42):
            connection.create_function("unixepoch", -1, lambda *_: time.time())

    sqlalchemy.event.listen(sqlalchemy.engine.Engine, "connect", unixepoch)
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    DBOS(config={"name": "idemtools-keys", "system_database_url": url})
    DBOS.launch()
    try:
        yield DBOS
    finally:
        DBOS.destroy(destroy_registry=False)
        sqlalchemy.event.remove(sqlalchemy.engine.Engine, "connect", unixepoch)
