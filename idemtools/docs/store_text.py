"""What the retention page says about a store: one function, `store_text(store)`.

Why one function: the words belong to the store (`Store.info()`, a `StoreInfo`), so a fifth
store needs no edit here; a store written against the five-operation protocol alone gets words
that send the reader to its documentation (`idemtools.stores.base.store_info`).
"""

from __future__ import annotations

from ..stores.base import Store, StoreInfo, store_info

__all__ = ["store_text"]


def store_text(store: Store) -> StoreInfo:
    """How `store` describes itself on the retention page, as a `StoreInfo`."""
    return store_info(store)
