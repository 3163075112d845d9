"""The engine's one way to its store: every operation timed and every failure translated.

Before this module each call site wrapped the store by hand, and two (the read after a lost
answer, the release after a failed transaction) were never timed. Here each operation is
written once, so a new call site cannot miss either:

- timing: `idemtools.store.duration` per operation, when a meter is set (no extra frame
  when none is: the check is inline);
- translation: a store raises only refusals (`RefusedError`: its own `StoreUnavailableError`,
  `StoreFullError`); anything else it raised (a driver's error) comes out as `StoreFailure`,
  a `StoreUnavailableError` that carries the original for the operator's log.

What a failure means to the call depends on the operation: a failed claim refuses the call
(`claim` counts it and logs it, and gives the client a message without the store's details);
a failed completion is tried again, a failed release is logged. Those decisions stay with the
engine; this module only makes sure each failure reaches it in one shape.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, cast

from ..errors import RefusedError, StoreFullError, StoreUnavailableError
from ..stores.base import (
    Claim,
    LapsingStore,
    Record,
    Store,
    ToolWrites,
    TransactionalStore,
    store_info,
)
from .decision import digest

if TYPE_CHECKING:
    from .stats import EngineStats
    from .telemetry import Telemetry

__all__ = ["StoreCalls", "StoreFailure", "original", "store_kind", "store_name"]

log = logging.getLogger("idemtools")


def store_kind(store: Store) -> tuple[str, str | None]:
    """The store's kind and its description (None when it has none): the one place the
    engine asks a store about itself."""
    kind = getattr(store, "kind", type(store).__name__)
    description = getattr(store, "description", None)
    if not isinstance(description, str) or not description:
        return kind, None
    return kind, description


def store_name(store: Store) -> str:
    """The store's kind, and its safe description when it has one (never a password):
    `Store.info().description`, or for a store without `info()` what it would have said."""
    return store_info(store).description


class StoreFailure(StoreUnavailableError):
    """A store raised something other than a refusal; `original` is what it raised."""

    def __init__(self, exc: Exception) -> None:
        super().__init__("the idempotency store is unavailable; the call was not run")
        self.original = exc


def original(exc: BaseException) -> BaseException:
    """What the store itself raised, for logs: the driver's error behind a `StoreFailure`."""
    return exc.original if isinstance(exc, StoreFailure) else exc


class StoreCalls:
    """One engine's store operations; see the module docstring."""

    __slots__ = ("_stats", "_telemetry", "lapses", "replaces", "store", "transactional")

    def __init__(self, store: Store, telemetry: Telemetry, stats: EngineStats) -> None:
        self.store = store
        self.transactional = isinstance(store, TransactionalStore)
        # A store written against the five operations alone takes none of the unknown-outcome
        # keywords: it never keeps a lapsed claim, and with it a lapsed lease frees the key.
        self.lapses = _takes(store.claim, "keep_lapsed") and _takes(store.release, "lapse")
        self.replaces = _takes(store.complete, "replaceable")
        self._telemetry = telemetry
        self._stats = stats

    def _timed(self, operation: str, op: Awaitable[object]) -> Awaitable[object]:
        telemetry = self._telemetry
        return op if telemetry.durations is None else telemetry.timed(operation, op)

    async def claim(
        self, scope: str, key: str, fp: str, owner: str, lease: float, keep_lapsed: float = 0.0
    ) -> Claim:
        """Claim the key; a failure becomes the refusal the client gets
        (`idempotency_store_unavailable`), counted in `stats.store_errors` and logged at
        WARNING with its cause. The client's message never carries the store's details
        (hosts, file paths, SQL, driver text), only a `client_message` the store marked safe."""
        op: Awaitable[Claim] = (
            cast(LapsingStore, self.store).claim(
                scope, key, fp, owner, lease, keep_lapsed=keep_lapsed
            )
            if keep_lapsed and self.lapses
            else self.store.claim(scope, key, fp, owner, lease)
        )
        if self._telemetry.durations is not None:  # inline: no call when unmetered
            op = self._telemetry.timed("claim", op)
        try:
            return await op
        except StoreUnavailableError as exc:
            raise self._refusal(exc, key) from exc
        except RefusedError as exc:
            if exc.key is None:  # stores do not know the raw key; the client's error data does
                exc.key = key
            if isinstance(exc, StoreFullError):
                log.warning(
                    "idempotency store %s is full key_digest=%s: %s",
                    store_name(self.store),
                    digest(key),
                    exc,
                )
            raise
        except Exception as exc:
            raise self._refusal(exc, key) from exc

    def _refusal(self, exc: Exception, key: object) -> StoreUnavailableError:
        self._stats.store_errors += 1
        if isinstance(exc, StoreUnavailableError):
            cause = exc.__cause__
            detail = f"{exc}" + (f" (cause: {cause!r})" if cause is not None else "")
            shown = exc.client_message
        else:
            detail, shown = repr(exc), None
        log.warning(
            "idempotency store %s failed key_digest=%s: %s",
            store_name(self.store),
            digest(key),
            detail,
        )
        return StoreUnavailableError(
            shown or "the idempotency store is unavailable; the call was not run", key=key
        )

    async def complete(
        self, scope: str, key: str, owner: str, data: bytes, retention: float, fp: str
    ) -> bool:
        op: Awaitable[bool] = self.store.complete(
            scope, key, owner, data, retention, fingerprint=fp
        )
        if self._telemetry.durations is not None:  # inline: no call when unmetered
            op = self._telemetry.timed("complete", op)
        try:
            return await op
        except RefusedError:
            raise
        except Exception as exc:
            raise StoreFailure(exc) from exc

    async def complete_unknown(
        self, scope: str, key: str, owner: str, data: bytes, retention: float, fp: str
    ) -> bool:
        """Record an unknown outcome while the tool may still end: replaceable by this owner
        alone (a store without `replaceable` records it as final)."""
        store = self.store
        op = (
            cast(LapsingStore, store).complete(
                scope, key, owner, data, retention, fingerprint=fp, replaceable=True
            )
            if self.replaces
            else store.complete(scope, key, owner, data, retention, fingerprint=fp)
        )
        try:
            return await self._telemetry.timed("complete", op)
        except RefusedError:
            raise
        except Exception as exc:
            raise StoreFailure(exc) from exc

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        """Delete the owner's claim; `lapse`: turn it back into a lapsed claim instead, so
        the next claim finds it (a reconcile that could not decide)."""
        op = (
            cast(LapsingStore, self.store).release(scope, key, owner, lapse=True)
            if lapse and self.lapses
            else self.store.release(scope, key, owner)
        )
        try:
            return await self._telemetry.timed("release", op)
        except RefusedError:
            raise
        except Exception as exc:
            raise StoreFailure(exc) from exc

    async def get(self, scope: str, key: str) -> Record | None:
        try:
            return await self._telemetry.timed("get", self.store.get(scope, key))
        except RefusedError:
            raise
        except Exception as exc:
            raise StoreFailure(exc) from exc

    def execution(
        self, scope: str, key: str, owner: str
    ) -> AbstractAsyncContextManager[ToolWrites | None]:
        """The transaction a transactional policy's tool runs in (not timed: it spans the
        tool's own run). What it raises is the transactional execution's to handle."""
        assert isinstance(self.store, TransactionalStore)
        return self.store.execution(scope, key, owner)

    async def aclose(self) -> None:
        await self.store.aclose()


def _takes(operation: Callable[..., object], keyword: str) -> bool:
    """Whether a store operation accepts `keyword` (or any keyword)."""
    try:
        parameters = inspect.signature(operation).parameters
    except (TypeError, ValueError):
        return False
    return keyword in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )
