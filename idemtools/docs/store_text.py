"""What the retention page says about a store: one function, `store_text(store)`.

Why one function: the words belong to the store (a fifth store must not need an edit here).
`idemtools.stores.base.StoreInfo` is the value a store describes itself with; until every
store's `info()` carries these words, `store_text` builds the same `StoreInfo` from the table
below and the store's attributes. When `store_info(store)` lands it replaces the body of
`store_text` (one line) and the table goes; `describe` only ever sees a `StoreInfo`.
"""

from __future__ import annotations

from ..stores.base import StoreInfo

__all__ = ["store_text"]

_STORES: dict[str, tuple[str, str, str]] = {
    "memory": (
        "in-process memory",
        "Records are lost when the server restarts: a retry that reaches the restarted server "
        "runs the tool again.",
        "Per process: each instance or worker has its own records, so a retry that reaches "
        "another instance runs the tool again. Run one instance, or use a shared store.",
    ),
    "sqlite": (
        "SQLite database file",
        "Records survive restarts (they are in the database file).",
        "Shared by the processes on one host that open the same file; not shared across hosts.",
    ),
    "redis": (
        "Redis",
        "Records survive server restarts; they survive a Redis restart only as far as Redis "
        "persistence is configured.",
        "Shared by every instance that uses the same Redis.",
    ),
    "postgres": (
        "PostgreSQL",
        "Records survive restarts (they are in the database).",
        "Shared by every instance that uses the same database.",
    ),
}

_BOUNDS: dict[str, str] = {
    "redis": "Redis `maxmemory` (with `maxmemory-policy noeviction`)",
    "postgres": "the database's disk",
}
"""The limit of a store that idemtools does not count itself (`StoreInfo.bound`)."""


def store_text(store: object) -> StoreInfo:
    """How `store` describes itself on the retention page, as a `StoreInfo`.

    An unknown kind (a custom store) gets words that send the reader to its documentation
    rather than a guess. Bounds are read from the object, so the page shows what was
    configured, not the defaults.
    """
    kind = str(getattr(store, "kind", "") or type(store).__name__)
    label, restarts, instances = _STORES.get(
        kind,
        (
            f"custom store ({kind})",
            "See the store's documentation.",
            "See the store's documentation.",
        ),
    )
    description = getattr(store, "description", None)
    return StoreInfo(
        kind=kind,
        label=label,
        description=description if isinstance(description, str) and description else kind,
        restarts=restarts,
        instances=instances,
        bound=_BOUNDS.get(kind),
        max_records=_count(store, "max_records"),
        max_bytes=_count(store, "max_bytes"),
        max_records_per_scope=_count(store, "max_records_per_scope"),
    )


def _count(store: object, name: str) -> int | None:
    value = getattr(store, name, None)
    return value if isinstance(value, int) else None
