"""The store protocol: five atomic operations every store implements the same way.

The engine hashes, validates and decides; a store only keeps records and answers these atomically
(one lock, one transaction, one Lua script). Times are seconds measured by the store's own clock,
so stores that share a server (Redis, PostgreSQL) never compare clocks across machines.

    claim    no live record → create IN_PROGRESS(owner, fingerprint), lease seconds; return CLAIMED
             live record    → return it untouched
    renew    IN_PROGRESS and held by owner → extend the lease
    complete IN_PROGRESS and held by owner → COMPLETED(outcome), kept for `retention` seconds;
             also after the owner's lease ran out, as long as nobody else claimed the key
             (late completion; with `fingerprint`, a claim that expired away entirely is
             recorded anew)
    release  IN_PROGRESS and held by owner → delete (the call ended without a final outcome)
    get      the live record, or None

A record "held by owner" is fenced: a process whose lease ran out and was claimed anew can never
complete, renew or release the newer claim, nor overwrite a completed record. `complete` alone
does not require the lease to be live: an owner whose lease ran out while nobody else claimed
the key (a tool that blocked past its lease, a paused process) still records its outcome, so an
outcome is only ever lost when a second execution already began (semantics.md, Fencing). The
engine always passes `fingerprint` to `complete`, so a store whose expired claim is already gone
(Redis TTLs) can record it anew; without it a store may refuse such a late completion.

Stores raise only `StoreUnavailableError` (wrapping the driver's error) and `StoreFullError`;
they never drop a live record to make room.
"""

from __future__ import annotations

import enum
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "SCOPE_SHARE",
    "Claim",
    "Record",
    "Status",
    "Store",
    "StoreInfo",
    "ToolWrites",
    "TransactionalStore",
]

SCOPE_SHARE = 10
"""By default one scope may hold a tenth of an embedded store (MemoryStore's records and
bytes, SQLiteStore's bytes): a caller flooding unique keys is refused
(`idempotency_quota_exceeded`) while nine tenths stay for the others."""


class Status(str, enum.Enum):
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


@dataclass(frozen=True, slots=True)
class Record:
    """One idempotency record as a store returns it.

    `remaining` is the seconds left before the record expires (lease or retention), as the
    store saw it when it answered; the engine derives `retryAfterMs` from it.
    """

    status: Status
    fingerprint: str
    owner: str
    remaining: float
    outcome: bytes | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """The answer to `claim`: either we now hold the key, or the record that already does."""

    claimed: bool
    existing: Record | None = None


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
    ("Redis `maxmemory` (with `maxmemory-policy noeviction`)", "the database's disk")."""
    max_records: int | None = None
    max_bytes: int | None = None
    max_records_per_scope: int | None = None


@runtime_checkable
class Store(Protocol):
    """What the engine needs from a store. Keys are (scope hash, idempotency key)."""

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
