"""The store protocol: five atomic operations every store implements the same way.

The engine hashes, validates and decides; a store only keeps records and answers these atomically
(one lock, one transaction, one Lua script). Times are seconds measured by the store's own clock,
so stores that share a server (Redis, PostgreSQL) never compare clocks across machines.

    claim    no record (or an expired one) → create IN_PROGRESS(owner, fingerprint, claimed_at),
               lease seconds, remembered as a LAPSED claim for `keep_lapsed` seconds after its
               lease runs out (0: no lapsed claim is kept, and a lapsed lease frees the key)
             IN_PROGRESS of the same owner (a re-sent claim) → CLAIMED, unchanged
             LAPSED, same fingerprint → taken over: IN_PROGRESS(owner), CLAIMED with
               `lapsed` = the lapsed record (its dead owner, claimed_at, lapsed_at)
             LAPSED, another fingerprint, or any other live record → return it untouched
    renew    IN_PROGRESS, live and held by owner → extend the lease (and the lapsed keep after it)
    complete IN_PROGRESS or LAPSED held by owner → COMPLETED(outcome), kept for `retention`
               seconds (late completion: the lease may have run out, as long as nobody else
               claimed the key; with `fingerprint`, a claim that expired away entirely is
               recorded anew); `replaceable` lets the same owner overwrite it later
             COMPLETED by the same owner: replaceable → overwritten; else a re-sent
               completion → True, unchanged
             anyone else's record → False (fencing)
    release  IN_PROGRESS, live and held by owner → delete (the call ended without a final
               outcome); with `lapse=True` → LAPSED at once, kept for its keep_lapsed
             LAPSED held by owner → delete: an operator's release (`idemtools keys
               release`), the deliberate way to let the next claim run the tool again; with
               `lapse=True` → left as it is, False (nothing in progress to lapse)
    get      the live record (LAPSED ones included), or None

Every write is idempotent by owner: a claim or completion that finds its own owner token
already in place is its own success, whoever re-sent it (the store's retry, the driver's, a
proxy's). Owner tokens are unique per execution, so such a record can only be ours.

Lapsed claims count in a store's bounds (records and bytes) like the claim they were. A
record written before lapsed claims existed (no keep) lapses as it always did: a free key.

A record "held by owner" is fenced: a process whose lease ran out and was claimed anew can never
complete, renew or release the newer claim, nor overwrite a completed record. A lapsed claim is
held by the owner of the execution that lapsed (the last one: a retry that took it over and
gave it back, see `lapse=True`), and only that owner's token releases it. `complete` alone
does not require the lease to be live: an owner whose lease ran out while nobody else claimed
the key (a tool that blocked past its lease, a paused process) still records its outcome, so an
outcome is only ever lost when a second execution already began (docs/contract.md, Fencing). The
engine always passes `fingerprint` to `complete`, so a store whose expired claim is already gone
(Redis TTLs) can record it anew; without it a store may refuse such a late completion.

Stores raise only `StoreUnavailableError` (wrapping the driver's error) and `StoreFullError`;
they never drop a live record to make room.

Beside the operations a store describes itself and says how the lease keeper reaches it:

    info              a `StoreInfo`: kind, where (for logs), the words the generated docs use,
                      the bounds it was configured with
    for_lease_keeper  the store the lease keeper's own thread renews through (itself, a clone
                      with a connection of its own, or None: renew on the server's loop)

They are declared on `FullStore`, not on `Store`: `isinstance(x, Store)` checks every member of
a runtime-checkable protocol, and a store written against the operations alone must stay a
`Store`. Read them through `store_info(store)` and `lease_keeper_store(store)`, which give for
such a store what it would have said. `reference.ReferenceStore` is the executable version of
this docstring (the conformance suite's baseline; not for production).
"""

from __future__ import annotations

import enum
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..redaction import redact_url

__all__ = [
    "SCOPE_SHARE",
    "UNDOCUMENTED",
    "Claim",
    "ForgettingStore",
    "FullStore",
    "LapsingStore",
    "PurgingStore",
    "Record",
    "Status",
    "Store",
    "StoreInfo",
    "ToolWrites",
    "TransactionalStore",
    "describe",
    "lease_keeper_store",
    "store_info",
]

UNDOCUMENTED = "See the store's documentation."
"""What the generated docs say of a store that does not describe itself."""

SCOPE_SHARE = 10
"""By default one scope may hold a tenth of an embedded store (MemoryStore's records and
bytes, SQLiteStore's bytes): a caller flooding unique keys is refused
(`idempotency_quota_exceeded`) while nine tenths stay for the others."""


class Status(str, enum.Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    LAPSED = "lapsed"
    """A claim whose lease ran out without being completed, renewed or released (its process
    died or stopped renewing): kept for the tool's retention so the next claim finds it
    instead of running the tool again blindly."""


@dataclass(frozen=True, slots=True)
class Record:
    """One idempotency record as a store returns it.

    `remaining` is the seconds left before the record expires (lease or retention; for a
    LAPSED record, before the lapsed claim itself is dropped), as the store saw it when it
    answered; the engine derives `retryAfterMs` from it. `claimed_at` and `lapsed_at` are
    epoch seconds of the store's clock (None when the store does not know them: a record
    written before they were kept); `replaceable` marks a completed outcome its owner may
    still overwrite.
    """

    status: Status
    fingerprint: str
    owner: str
    remaining: float
    outcome: bytes | None = None
    claimed_at: float | None = None
    lapsed_at: float | None = None
    replaceable: bool = False


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to `claim`: either we now hold the key, or the record that already does.

    `lapsed`: with `claimed`, the lapsed claim (status LAPSED, its dead owner) this claim has
    just taken over, so the engine can reconcile what that execution may have done."""

    claimed: bool
    existing: Record | None = None
    lapsed: Record | None = None


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """What a store says about itself, for logs, generated docs and start-up checks.

    One value instead of attributes found by `getattr`, so a fifth store documents itself
    without an edit to the docs generator, and a misspelt bound cannot pass unnoticed.
    """

    kind: str
    """Short name: "memory", "sqlite", "redis", "postgres" (a custom store picks its own)."""
    label: str
    """What holds the records, for a reader: "in-process memory", "PostgreSQL"."""
    description: str
    """Where, for logs: the kind and its location with credentials redacted."""
    restarts: str
    """What a server restart does to the records."""
    instances: str
    """Which server instances share the records."""
    bound: str | None = None
    """The store's limit when it is not a count or a size idemtools enforces
    ("Redis `maxmemory` (with `maxmemory-policy noeviction`)", "the database's disk").
    The generated docs name `max_bytes`/`max_records` first when either is set, this text
    otherwise, and `UNDOCUMENTED` when this is None too."""
    max_records: int | None = None
    max_bytes: int | None = None
    max_records_per_scope: int | None = None


@runtime_checkable
class Store(Protocol):
    """What the engine needs from a store on every keyed call. Keys are (scope hash, key).

    `isinstance(x, Store)` checks these members only (the five operations, `aclose` and
    `kind`), so a store written before `info()` and `for_lease_keeper()` still is one; a store
    that has them too is a `FullStore` (see the module docstring).
    """

    kind: str
    """Short name for documentation: "memory", "sqlite", "redis", "postgres"."""

    async def claim(
        self, scope: str, key: str, fingerprint: str, owner: str, lease: float
    ) -> Claim: ...

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool: ...

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
    ) -> bool: ...

    async def release(self, scope: str, key: str, owner: str) -> bool: ...

    async def get(self, scope: str, key: str) -> Record | None: ...

    async def aclose(self) -> None: ...


class LapsingStore(Store, Protocol):
    """A store that keeps lapsed claims and replaceable outcomes (the keywords below).

    Apart from `Store` so that a store written against the five operations alone still
    type-checks as one; the engine finds out at run time whether a store takes these keywords
    and, for one that does not, keeps no lapsed claims (a lapsed lease frees the key). Every
    store idemtools ships is one.
    """

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease: float,
        *,
        keep_lapsed: float = 0.0,
    ) -> Claim: ...

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
        replaceable: bool = False,
    ) -> bool: ...

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool: ...


@runtime_checkable
class FullStore(Store, Protocol):
    """The whole store contract: the operations, and what a store says about itself.

    Every store idemtools ships is one, and the conformance suite checks both members. The
    engine, the lease keeper and the docs generator read them through `store_info` and
    `lease_keeper_store`, so a `Store` without them keeps working.
    """

    def info(self) -> StoreInfo:
        """Kind, location (credentials redacted), the docs' words, the configured bounds.

        Cheap and without I/O: read for logs, generated docs and start-up checks."""
        ...

    def for_lease_keeper(self) -> Store | None:
        """The store the lease keeper renews through from its own thread and event loop.

        `self` when the operations may be called from any loop (a thread lock, no awaits);
        a new store on the same records with its own connection when the client belongs to
        one event loop (the keeper closes it when it stops); None when no such clone can be
        made (renewals then go through the server's own loop)."""
        ...


@runtime_checkable
class _Describes(Protocol):
    def info(self) -> StoreInfo: ...


@runtime_checkable
class _OpensForKeeper(Protocol):
    def for_lease_keeper(self) -> Store | None: ...


def describe(kind: str, where: object = None) -> str:
    """`StoreInfo.description`: the kind, and where the records live when the store says so.

    A URL's password is replaced by `***`: a custom store may describe itself by its URL,
    and this text goes to logs."""
    if not isinstance(where, str) or not where:
        return kind
    return f"{kind} ({redact_url(where)})"


def _bound_attr(store: object, name: str) -> int | None:
    value = getattr(store, name, None)
    return value if isinstance(value, int) else None


def store_info(store: Store) -> StoreInfo:
    """`store.info()`, or for a store without it what it would have said.

    Such a store (written against the five operations alone) is described from its `kind`,
    its `description` and its `max_bytes` / `max_records` / `max_records_per_scope`
    attributes when it has them, and "See the store's documentation." for the rest: the words
    the generated docs have always used for a store they do not know.
    """
    if isinstance(store, _Describes):
        return store.info()
    kind = str(getattr(store, "kind", "") or type(store).__name__)
    return StoreInfo(
        kind=kind,
        label=f"custom store ({kind})",
        description=describe(kind, getattr(store, "description", None)),
        restarts=UNDOCUMENTED,
        instances=UNDOCUMENTED,
        max_records=_bound_attr(store, "max_records"),
        max_bytes=_bound_attr(store, "max_bytes"),
        max_records_per_scope=_bound_attr(store, "max_records_per_scope"),
    )


def lease_keeper_store(store: Store) -> Store | None:
    """`store.for_lease_keeper()`, or None (renew on the server's loop) when it has no such method.

    A store written against the five operations alone says nothing of where they may run: an
    `asyncio.Lock` made at construction, or an async driver's client, belongs to the server's
    event loop, and called from the keeper's thread every renewal would fail ("attached to a
    different loop") while the calls go on. So it is renewed where its calls run; a store
    whose operations may run on any loop says so with `for_lease_keeper()` returning itself.
    Errors of `for_lease_keeper()` propagate: the keeper logs them and renews on the server's
    loop."""
    if isinstance(store, _OpensForKeeper):
        return store.for_lease_keeper()
    return None


@runtime_checkable
class ForgettingStore(Store, Protocol):
    """A store that can delete a record whatever its status: an operator's forced release
    (`idemtools keys release --force`), never part of a keyed call."""

    async def forget(self, scope: str, key: str, owner: str) -> bool:
        """Delete the live record held by `owner`, in progress or completed; False if none."""
        ...


@runtime_checkable
class PurgingStore(Store, Protocol):
    """A store whose expired records stay on disk until deleted (SQLite, PostgreSQL): a
    maintenance task may purge them. Redis expires records itself; MemoryStore drops them on
    its own writes."""

    async def purge_expired(self, *, limit: int | None = None) -> int:
        """Delete expired records, at most `limit` (None: all of them, in bounded batches,
        each its own short transaction); return how many."""
        ...


class ToolWrites(Protocol):
    """What `TransactionalStore.execution` yields: a way to undo the tool's own writes while
    keeping the transaction, so the outcome can still be recorded through it."""

    async def rollback(self) -> None: ...


@runtime_checkable
class TransactionalStore(Store, Protocol):
    """A store that can run a tool inside its own transaction (PostgresStore).

    For a policy with `transactional=True` the engine enters `execution(...)` around the tool
    *and* the `complete` call: the store opens a transaction, exposes it to the tool (how is the
    store's business, e.g. a context variable), makes `complete` write through it, and commits on
    exit. If the commit fails, the exit raises and the engine answers with an error and releases
    the claim: nothing the tool wrote was kept, so a retry may run it again.

    A call that *fails* must not keep half its work either: when the block yields a
    `ToolWrites`, the engine calls its `rollback()` before recording an outcome that is an error
    (a JSON-RPC error or an `isError` result) or not final. The error record then commits
    alone: the retry replays the error, and the database holds nothing of the failed attempt.
    """

    def execution(
        self, scope: str, key: str, owner: str
    ) -> AbstractAsyncContextManager[ToolWrites | None]: ...
