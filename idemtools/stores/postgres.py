"""PostgresStore: records in one PostgreSQL table, shared by every server instance.

Why it is built this way:

* **One table, primary key (scope, key), one statement per operation.** A claim is a single
  `INSERT … ON CONFLICT (scope, key) DO UPDATE … WHERE <the old row expired>` whose result
  tells whether we took the key; the same statement reads the live record otherwise, so a
  replay is one round trip. PostgreSQL's unique index makes the claim atomic across any number
  of instances without advisory locks or serializable transactions.
* **Time is the database's.** Expiry is `expires_at timestamptz` computed with
  `statement_timestamp()`; `remaining` is computed by the server too. Instances never compare
  their own clocks, so clock skew between machines cannot extend or cut a lease.
* **Keys are `bytea`.** PostgreSQL `text` cannot hold NUL and rejects lone surrogates, both of
  which a JSON string key may contain; the UTF-8 bytes (lone surrogates kept with
  `surrogatepass`) compare exactly as the key does. The scope is stored the same way.
* **No connection is held while a tool runs** (outside transactional mode): each operation
  borrows a pooled connection (autocommit) for one statement and gives it back.
* **Schema on request only**: `await store.create_schema()` or `schema_sql()` in your
  migrations. Importing or constructing the store never touches the database.
* **Bounded cleanup.** Rows are not deleted the moment they expire (a claim simply reuses an
  expired row), so `purge_expired(limit=...)` deletes at most `limit` expired rows per call
  (`purge_expired()`: all of them, a thousand per statement),
  using the `expires_at` index and `SKIP LOCKED` so concurrent purgers never wait on each other.
  Call it periodically (cron, a background task), and/or let the store do it opportunistically:
  every `purge_every`-th successful claim of a store instance is followed by one bounded purge of
  at most `purge_limit` rows on the same connection (one extra short statement for that claim).
* **Failures fail closed.** Connection errors, pool timeouts and server errors become
  `StoreUnavailableError` chained from psycopg's exception (a full disk becomes
  `StoreFullError`). A broken connection is retried once on a fresh one after the pool has
  checked its idle connections, so the store recovers by itself after an outage or a server
  restart; the retry is harmless even if the first attempt ran (a record that already bears our
  unique owner token is recognised as ours).
* **Per-scope quota** (`max_records_per_scope`, off by default; without it a claim is the
  one statement above). With it, a claim that may create a record runs in a short transaction:
  `pg_advisory_xact_lock` on (table, scope) serialises the claims of one scope (other scopes
  never wait), then one statement counts the scope's live records and tells whether this key
  is among them, then the claim statement runs as usual. A key that is live is answered
  whatever the count; a new one beyond the quota is refused (`QuotaExceededError`) and the
  transaction rolled back. Four round trips instead of one, only with a quota. The count walks
  the `(scope, expires_at)` index that `schema_sql(per_scope_index=True)` adds (`create_schema`
  adds it for a store with a quota); without it, the primary key's scope prefix still works.
* **Byte budget** (`max_bytes`, off by default: the database's disk bounds the table). With
  it, `schema_sql(byte_budget=True)` (`create_schema` for a store with a budget) adds a one-row
  table `<table>_usage` and a row trigger that keeps in it the estimated bytes of every record
  (scope, key, fingerprint, owner, outcome, plus `RECORD_OVERHEAD`; a claim also counts the
  room of the tombstone its completion may need, `TOMBSTONE_RESERVE`). A claim or completion
  then runs in a short transaction that reads the total after its write: a claim over the
  budget is rolled back, expired rows are purged, and it is tried once more before
  `StoreFullError`; a completion over the budget is rolled back and records a tombstone
  instead, which fits in its claim's reserved room, so the retry is refused
  (`idempotency_outcome_not_kept`), never run again. Writers that change bytes wait on the
  usage row one at a time (renewals change none), so a budget costs throughput; it is a
  bound, not a default.
* **Transactional mode** (`TransactionalStore`): `execution(scope, key, owner)` opens a
  transaction on a pooled connection and exposes it to the tool through `current_connection()`;
  `complete` (and `release`) called for that same claim inside the block write through the same
  transaction, and the block commits on exit. The tool's own writes and the completed record
  therefore commit together or not at all: if the process dies before the commit, PostgreSQL
  rolls both back, the claim (committed earlier, on its own) ends by lease, and a retry runs the
  tool again against a database that never saw the first attempt. A tool that fails (raises,
  returns `isError`, or hits an SQL error) is rolled back to a savepoint taken before it ran,
  and its error record commits alone: the retry replays the error, the writes are gone.
* **Lapsed claims.** `lease_end` is a claim's lease end, `expires_at` the end of the row: the
  lease plus the claim's `keep_lapsed`. Every bound, count and purge, written on `expires_at`,
  counts a lapsed claim like the claim it was; a row in progress whose `lease_end` passed is
  LAPSED, and a claim of the same fingerprint takes it over with one conditional UPDATE (the
  dead owner's row, or nothing). A row without a `lease_end` has no lapsed bookkeeping and is
  a free key once its `expires_at` (its lease's end) passed. `schema_sql()` adds the columns
  to an existing table that lacks them (`ALTER TABLE … ADD COLUMN IF NOT EXISTS`): run
  `create_schema()` (or the migration) on such a table.
* **Transactions never take the whole pool.** A transactional call holds its connection while
  its tool runs, possibly for longer than a lease; with as many such calls as connections, every
  claim, completion, release and replay of the other calls would wait for the pool's `timeout`
  and fail (a completion that fails loses its record). So at most `pool.max_size -
  transaction_reserve` transactions hold a connection at once; the others wait for a slot (not
  for a connection, so no `PoolTimeout`) while the lease keeper, on its own pool, keeps their
  claims alive. The reserved connections serve the short statements.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import RecordCorruptError, RefusedError, StoreFullError, StoreUnavailableError
from ..outcome import TOMBSTONE_RESERVE
from ._common import (
    at_least_one,
    corrupt,
    encode,
    not_kept,
    once_more_if_broken,
    quota_exceeded,
    store_full,
)
from ._extras import require_extra
from ._url_options import defaults as option_defaults
from ._url_options import driver_refused, merged
from ._url_options import leftover as leftover_options
from ._url_options import take as take_options
from .base import Claim, Record, Status, StoreInfo, describe

with require_extra("postgres", "PostgresStore"):
    import psycopg
    from psycopg import AsyncConnection, sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import AsyncConnectionPool, PoolTimeout

__all__ = ["RECORD_OVERHEAD", "PostgresStore", "current_connection"]

T = TypeVar("T")

_CLAIM_ATTEMPTS = 5

_PURGE_BATCH = 1000
"""Rows one purge statement deletes at most (`purge_expired`): short transactions."""


_TOOL_SAVEPOINT = "idemtools_tool"
_COMPLETE_SAVEPOINT = "idemtools_complete"

RECORD_OVERHEAD = 100
"""Bytes counted per row besides its data, under `max_bytes`: tuple header, index entries."""


class _OverBudget(Exception):
    """A write took the usage total past `max_bytes`; its transaction is rolled back."""


@dataclass(frozen=True)
class _Tx:
    store: PostgresStore
    scope: str
    key: str
    owner: str
    conn: AsyncConnection[Any]

    async def rollback(self) -> None:
        """Undo what the tool wrote (also after an SQL error aborted the transaction)."""
        await self.conn.execute(f"ROLLBACK TO SAVEPOINT {_TOOL_SAVEPOINT}")


_current: ContextVar[_Tx | None] = ContextVar("idemtools_postgres_tx", default=None)


def current_connection() -> AsyncConnection[Any]:
    """The connection of the idempotency transaction the current tool runs in.

    Only inside a tool whose policy says `transactional=True`, run by an engine whose store is
    a `PostgresStore`. Write the tool's side effects through it (and do not commit or roll back
    yourself): they commit together with the completed idempotency record, or not at all.

    Raises:
        LookupError: outside such a tool (e.g. the policy is not transactional, or the store
            is not a PostgresStore), so a tool never writes outside the transaction unknowingly.
    """
    tx = _current.get()
    if tx is None:
        raise LookupError(
            "no idemtools PostgreSQL transaction here: current_connection() works only inside "
            "a tool declared @idempotent(transactional=True) and run with a PostgresStore"
        )
    return tx.conn


_b = encode


def _table_ident(table: str) -> sql.Identifier:
    parts = table.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ValueError(f"table must be 'name' or 'schema.name', got {table!r}")
    return sql.Identifier(*parts)


class PostgresStore:
    """Idempotency records in a PostgreSQL table, shared by all instances that use it.

    Args:
        pool: a `psycopg_pool.AsyncConnectionPool` whose connections are in autocommit mode
            (the store sets autocommit itself when it creates the pool; a pool passed in stays
            the caller's and is not closed by `aclose()`).
        table: table name, optionally schema-qualified (`"schema.table"`).
        purge_every: run a bounded purge after every N-th successful claim; 0 disables.
        purge_limit: rows deleted at most by one opportunistic purge.
        max_records_per_scope: live records (in progress or completed) per scope at most; a
            claim beyond it is refused with `QuotaExceededError`, other scopes unaffected.
            None (the default): no quota, one statement per claim. The store as a whole is
            bounded by the database's disk (`StoreFullError` on disk full).
        transaction_reserve: connections of the pool that transactional executions never
            take, kept for the short statements of every call (claims, completions, replays).
            Transactions beyond `pool.max_size - transaction_reserve` (at least one) wait for
            a slot, their claims renewed meanwhile.
        transaction_wait: seconds a transactional call waits for a slot at most before it is
            refused with `StoreUnavailableError` (its claim released, nothing run); None (the
            default) waits as long as the calls ahead of it run.
        max_bytes: estimated bytes of the records at most (see the module notes; needs the
            usage table `create_schema` adds for such a store). A claim beyond it is refused
            with `StoreFullError`; an outcome that does not fit is kept as a tombstone. None
            (the default): no budget.

    Prefer `PostgresStore.from_url(url)`, then `await store.create_schema()` once (or put
    `PostgresStore.schema_sql()` into your migrations).
    """

    kind = "postgres"

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        table: str = "idemtools_records",
        purge_every: int = 100,
        purge_limit: int = 100,
        max_records_per_scope: int | None = None,
        transaction_reserve: int = 2,
        transaction_wait: float | None = None,
        max_bytes: int | None = None,
        _owns_pool: bool = False,
    ) -> None:
        if purge_every < 0 or purge_limit < 1:
            raise ValueError("purge_every must be >= 0 and purge_limit >= 1")
        at_least_one("max_records_per_scope", max_records_per_scope, none="no quota")
        if transaction_reserve < 0 or (transaction_wait is not None and transaction_wait <= 0):
            raise ValueError("transaction_reserve must be >= 0 and transaction_wait positive")
        at_least_one("max_bytes", max_bytes, none="no budget")
        self.max_bytes = max_bytes
        self.outcomes_not_kept = 0
        """Completions recorded as a tombstone because the outcome did not fit `max_bytes`."""
        self.max_records_per_scope = max_records_per_scope
        self.transaction_wait = transaction_wait
        self.max_transactions = max(1, pool.max_size - transaction_reserve)
        self._transaction_slots = asyncio.Semaphore(self.max_transactions)
        self._pool = pool
        self.table = table
        self.purge_every = purge_every
        self.purge_limit = purge_limit
        self._owns_pool = _owns_pool
        self._opened = False
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._claims = 0
        q = _queries(table)
        self._q_claim = q["claim"]
        self._q_renew = q["renew"]
        self._q_complete = q["complete"]
        self._q_complete_late = q["complete_late"]
        self._q_take_over = q["take_over"]
        self._q_release_lapse = q["release_lapse"]
        self._q_release = q["release"]
        self._q_release_held = q["release_held"]
        self._q_forget = q["forget"]
        self._q_get = q["get"]
        self._q_purge = q["purge"]
        self._q_scope_lock = q["scope_lock"]
        self._q_scope_count = q["scope_count"]
        self._q_usage = q["usage"]

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        table: str = "idemtools_records",
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout: float = 2.0,
        timeout: float = 5.0,
        purge_every: int = 100,
        purge_limit: int = 100,
        max_records_per_scope: int | None = None,
        transaction_reserve: int = 2,
        transaction_wait: float | None = None,
        max_bytes: int | None = None,
        **connect_kwargs: Any,
    ) -> PostgresStore:
        """A store with its own connection pool to `url` (opened on first use, closed by aclose).

        `timeout` bounds how long an operation waits for a pooled connection — while the server
        is down that is how long a keyed call waits before `idempotency_store_unavailable`.
        `connect_timeout` bounds one connection attempt (libpq rounds it up to 2 s).

        idemtools' own options may ride in the URL's query (`?table=idem&timeout=2s`); a
        keyword given too wins. The rest of the query goes to libpq, which is asked now
        whether it takes it: an unknown option is refused here, by name.
        """
        given = dict(locals())  # the parameters, before anything else is bound
        url, found = take_options(url, "postgres")
        if found:
            own = merged(found, given, option_defaults(cls.from_url))
            return cls.from_url(url, **own, **connect_kwargs)
        if leftover_options(url):
            from psycopg.conninfo import conninfo_to_dict

            try:
                conninfo_to_dict(url)
            except Exception as exc:
                refused = driver_refused("postgres", url, exc)
                if refused is None:
                    raise
                raise refused from None
        kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        kwargs.update(connect_kwargs)
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=kwargs,
            timeout=timeout,
            open=False,
            name="idemtools",
        )
        return cls(
            pool,
            table=table,
            purge_every=purge_every,
            purge_limit=purge_limit,
            max_records_per_scope=max_records_per_scope,
            transaction_reserve=transaction_reserve,
            transaction_wait=transaction_wait,
            max_bytes=max_bytes,
            _owns_pool=True,
        )

    def for_lease_keeper(self) -> PostgresStore:
        """The same table through a small pool of its own (at most 2 connections), for the lease
        keeper's thread. Renewals therefore never wait behind the tools' transactions for a
        connection of the main pool, however busy it is."""
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            self._pool.conninfo,
            min_size=1,
            max_size=2,
            kwargs=_with_autocommit(self._pool.kwargs),
            timeout=self._pool.timeout,
            open=False,
            name="idemtools-lease-keeper",
        )
        return PostgresStore(pool, table=self.table, purge_every=0, _owns_pool=True)

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        return self._pool

    @property
    def description(self) -> str:
        """Server, database and table, for the operator's log: never a password."""
        conninfo = self._pool.conninfo
        try:  # a conninfo callable, or one that does not parse, still names the table
            info = conninfo_to_dict(conninfo) if isinstance(conninfo, str) else {}
        except Exception:
            info = {}
        host = info.get("host") or "localhost"
        where = f"{info.get('user', '')}@{host}:{info.get('port', 5432)}/{info.get('dbname', '')}"
        return f"postgresql://{where.lstrip('@')} table={self.table!r}"

    def info(self) -> StoreInfo:
        """PostgreSQL, bounded by the database's disk, or by `max_bytes` when set."""
        return StoreInfo(
            kind=self.kind,
            label="PostgreSQL",
            description=describe(self.kind, self.description),
            restarts="Records survive restarts (they are in the database).",
            instances="Shared by every instance that uses the same database.",
            bound="the database's disk",
            max_bytes=self.max_bytes,
            max_records_per_scope=self.max_records_per_scope,
        )

    # -- schema ---------------------------------------------------------------------------------

    @staticmethod
    def schema_sql(
        table: str = "idemtools_records",
        *,
        per_scope_index: bool = False,
        byte_budget: bool = False,
    ) -> str:
        """The DDL for the records table, for migration tools. Idempotent (IF NOT EXISTS).

        `per_scope_index` adds the `(scope, expires_at)` index a per-scope quota counts on; it
        costs every write a little, so only stores with a quota want it. `byte_budget` adds
        the usage table and trigger a store with `max_bytes` needs (see the module notes).
        """
        ident = _table_ident(table)
        if byte_budget:
            return PostgresStore.schema_sql(table, per_scope_index=per_scope_index) + _budget_sql(
                table
            )
        index = sql.Identifier(table.split(".")[-1] + "_expires_idx")
        extra = ""
        if per_scope_index:
            scope_index = sql.Identifier(table.split(".")[-1] + "_scope_expires_idx")
            extra = (
                sql.SQL("CREATE INDEX IF NOT EXISTS {i} ON {t} (scope, expires_at);\n")
                .format(t=ident, i=scope_index)
                .as_string()
            )
        return (
            sql.SQL(
                """CREATE TABLE IF NOT EXISTS {t} (
    scope       bytea       NOT NULL,
    key         bytea       NOT NULL,
    status      text        NOT NULL CHECK (status IN ('p', 'c')),
    fingerprint text        NOT NULL,
    owner       text        NOT NULL,
    outcome     bytea,
    expires_at  timestamptz NOT NULL,
    lease_end   timestamptz,
    claimed_at  timestamptz,
    replaceable boolean     NOT NULL DEFAULT false,
    took_over   text,
    PRIMARY KEY (scope, key)
);
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS lease_end timestamptz,
    ADD COLUMN IF NOT EXISTS claimed_at timestamptz,
    ADD COLUMN IF NOT EXISTS replaceable boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS took_over text;
CREATE INDEX IF NOT EXISTS {i} ON {t} (expires_at);
"""
            )
            .format(t=ident, i=index)
            .as_string()
        ) + extra

    async def create_schema(self) -> None:
        """Create the table and its indexes if they do not exist (explicit, never implicit)."""
        ddl = self.schema_sql(
            self.table,
            per_scope_index=self.max_records_per_scope is not None,
            byte_budget=self.max_bytes is not None,
        )

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> None:
            await conn.execute(ddl)

        await self._run(op, None)

    async def drop_schema(self) -> None:
        """Drop the table (tests, uninstall). Every record is lost."""

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> None:
            await conn.execute(
                sql.SQL("DROP TABLE IF EXISTS {t}").format(t=_table_ident(self.table))
            )

        await self._run(op, None)
        if self.max_bytes is not None:

            async def drop_budget(conn: AsyncConnection[Any], _retrying: bool) -> None:
                await conn.execute(
                    sql.SQL("DROP TABLE IF EXISTS {u}; DROP FUNCTION IF EXISTS {f}()").format(
                        u=_derived(self.table, "_usage"), f=_derived(self.table, "_bytes")
                    )
                )

            await self._run(drop_budget, None)

    async def bytes_used(self) -> int:
        """The estimated bytes of the records, as `max_bytes` counts them (needs the budget's
        usage table: see `schema_sql(byte_budget=True)`)."""

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> int:
            cur = await conn.execute(self._q_usage)
            row = await cur.fetchone()
            return 0 if row is None else int(row[0])

        result: int = await self._run(op, None)
        return result

    async def _over_budget(self, conn: AsyncConnection[Any]) -> bool:
        """Inside the write's transaction: whether the total now exceeds `max_bytes`. The
        trigger's update holds the usage row until the transaction ends, so this answer
        holds until then."""
        cur = await conn.execute(self._q_usage)
        row = await cur.fetchone()
        return row is not None and self.max_bytes is not None and int(row[0]) > self.max_bytes

    async def _purge_for_room(self, conn: AsyncConnection[Any]) -> bool:
        """Delete expired rows (a few bounded batches); True if any went."""
        deleted = 0
        for _ in range(10):
            cur = await conn.execute(self._q_purge, (self.purge_limit,))
            deleted += cur.rowcount
            if cur.rowcount < self.purge_limit:
                break
        return deleted > 0

    def _not_kept(self, outcome: bytes, key: str) -> bytes:
        self.outcomes_not_kept += 1
        return not_kept(f"PostgreSQL store {self.description}", outcome, self.max_bytes, key)

    async def purge_expired(self, *, limit: int | None = None) -> int:
        """Delete expired records, at most `limit` (None: all of them, `_PURGE_BATCH` rows per
        statement); returns how many. Safe to run concurrently (`SKIP LOCKED`)."""
        total = 0
        while limit is None or total < limit:
            batch = _PURGE_BATCH if limit is None else min(_PURGE_BATCH, limit - total)

            async def op(conn: AsyncConnection[Any], _retrying: bool, batch: int = batch) -> int:
                cur = await conn.execute(self._q_purge, (batch,))
                return cur.rowcount

            deleted: int = await self._run(op, None)
            total += deleted
            if deleted < batch:
                break
        return total

    # -- plumbing -------------------------------------------------------------------------------

    async def _ensure_open(self) -> None:
        if self._opened:
            return
        async with self._open_lock:
            if self._closed:
                raise StoreUnavailableError("the PostgresStore was closed")
            if not self._opened:
                if self._owns_pool:
                    # wait=False: a server that is down must not block the first call here;
                    # getconn's `timeout` bounds the wait instead.
                    await self._pool.open(wait=False)
                self._opened = True

    async def _run(
        self, op: Callable[[AsyncConnection[Any], bool], Awaitable[T]], key: str | None
    ) -> T:
        """Run `op(conn, retrying)` on a pooled connection; retry once if it was broken."""

        async def attempt(retrying: bool) -> T:
            async with self._pool.connection() as conn:
                return await op(conn, retrying)

        try:
            await self._ensure_open()
            # An outage or a server restart leaves every idle pooled connection dead; drop
            # them all, then try once more on a fresh one.
            return await once_more_if_broken(attempt, _broken, before_retry=self._pool.check)
        except RefusedError:
            raise
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"PostgreSQL is unavailable (no connection within {self._pool.timeout} s): {exc}",
                key=key,
            ) from exc
        except psycopg.errors.DiskFull as exc:
            # Sent to the client as is: the driver's words stay in the chained cause (the log).
            raise StoreFullError(
                "the idempotency store is out of disk space; new keyed calls are refused",
                key=key,
            ) from exc
        except psycopg.errors.UndefinedColumn as exc:
            raise StoreUnavailableError(
                f"the idempotency table {self.table!r} lacks this release's columns; run "
                "`await store.create_schema()` or apply PostgresStore.schema_sql() again "
                f"({exc})",
                key=key,
            ) from exc
        except psycopg.errors.UndefinedTable as exc:
            raise StoreUnavailableError(
                f"the idempotency table {self.table!r} does not exist; run "
                "`await store.create_schema()` or apply PostgresStore.schema_sql() "
                f"({exc})",
                key=key,
            ) from exc
        except (psycopg.Error, OSError) as exc:
            raise StoreUnavailableError(f"PostgreSQL failed: {exc!r}", key=key) from exc

    def _tx_for(self, scope: str, key: str, owner: str) -> _Tx | None:
        tx = _current.get()
        if (
            tx is not None
            and tx.store is self
            and (tx.scope, tx.key, tx.owner)
            == (
                scope,
                key,
                owner,
            )
        ):
            return tx
        return None

    @staticmethod
    def _record(row: tuple[Any, ...], key: str) -> Record:
        status_raw, fp, owner, outcome, remaining, lease_left, claimed_at, lease_end, repl = row[:9]
        if status_raw == "p":
            status = Status.IN_PROGRESS
        elif status_raw == "c":
            status = Status.COMPLETED
        else:
            raise _corrupt(key, f"unknown status {status_raw!r}")
        if status is Status.COMPLETED and outcome is None:
            raise _corrupt(key, "completed without an outcome")
        lapsed_at = None
        if status is Status.IN_PROGRESS and lease_left is not None:
            if lease_left <= 0:  # its lease ran out: kept, lapsed, until expires_at
                status, lapsed_at = Status.LAPSED, lease_end
            else:
                remaining = lease_left
        return Record(
            status=status,
            fingerprint=fp,
            owner=owner,
            remaining=max(0.0, float(remaining)),
            outcome=None if outcome is None else bytes(outcome),
            claimed_at=None if status is Status.COMPLETED else claimed_at,
            lapsed_at=lapsed_at,
            replaceable=bool(repl),
        )

    # -- the protocol ---------------------------------------------------------------------------

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease: float,
        *,
        keep_lapsed: float = 0.0,
    ) -> Claim:
        params = {
            "s": _b(scope),
            "k": _b(key),
            "f": fingerprint,
            "o": owner,
            "lease": lease,
            "keep": max(0.0, keep_lapsed),
        }
        quota = self.max_records_per_scope

        async def op(conn: AsyncConnection[Any], retrying: bool) -> Claim:
            if self.max_bytes is None:
                return await bounded(conn, retrying)
            for attempt in range(2):
                try:
                    async with conn.transaction():
                        claim = await bounded(conn, retrying)
                        if claim.claimed and await self._over_budget(conn):
                            raise _OverBudget
                        return claim
                except _OverBudget:
                    if attempt or not await self._purge_for_room(conn):
                        break
            raise store_full("PostgreSQL", self.max_bytes or 0, "bytes of records", key)

        async def bounded(conn: AsyncConnection[Any], retrying: bool) -> Claim:
            if quota is None:
                return await claim_on(conn, retrying)
            async with conn.transaction():
                await conn.execute(self._q_scope_lock, (self._scope_lock_id(scope),))
                cur = await conn.execute(self._q_scope_count, params)
                row = await cur.fetchone()
                live, mine = (0, False) if row is None else row
                if not mine and live >= quota:
                    raise quota_exceeded(quota, key)
                return await claim_on(conn, retrying)

        async def claim_on(conn: AsyncConnection[Any], retrying: bool) -> Claim:
            for _ in range(_CLAIM_ATTEMPTS):
                cur = await conn.execute(self._q_claim, params)
                row = await cur.fetchone()
                if row is None:
                    # The live row was committed by a concurrent claim after this statement's
                    # snapshot was taken: ON CONFLICT saw it, the SELECT could not. Ask again.
                    continue
                if row[0]:
                    await self._maybe_purge(conn)
                    return Claim(claimed=True)
                record = self._record(row[1:], key)
                if record.owner == owner and record.status is Status.IN_PROGRESS:
                    # Ours already: a re-sent claim landed first; answered as the first was.
                    return Claim(claimed=True, lapsed=_took_over(row[10], fingerprint, row[11]))
                if record.status is Status.LAPSED and record.fingerprint == fingerprint:
                    # Taken over only if it is still that dead owner's lapsed claim.
                    cur = await conn.execute(self._q_take_over, {**params, "dead": record.owner})
                    if cur.rowcount == 1:
                        return Claim(claimed=True, lapsed=record)
                    continue  # someone else took it (or it ended) meanwhile: ask again
                return Claim(claimed=False, existing=record)
            raise StoreUnavailableError(
                "PostgreSQL claim did not settle under contention; retry", key=key
            )

        return await self._run(op, key)

    def _scope_lock_id(self, scope: str) -> int:
        """The advisory lock key of (table, scope): 64 bits of a SHA-256, as a signed bigint.

        Two scopes sharing a key (2^-64) would only wait for each other, never share a count.
        """
        digest = hashlib.sha256(
            b"idemtools quota\x00" + _b(self.table) + b"\x00" + _b(scope)
        ).digest()
        return int.from_bytes(digest[:8], "big", signed=True)

    async def _maybe_purge(self, conn: AsyncConnection[Any]) -> None:
        if not self.purge_every:
            return
        self._claims += 1
        if self._claims % self.purge_every == 0:
            await conn.execute(self._q_purge, (self.purge_limit,))

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        params = (lease, lease, _b(scope), _b(key), owner)

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            cur = await conn.execute(self._q_renew, params)
            return cur.rowcount == 1

        return await self._run(op, key)

    @staticmethod
    async def _in_tx(tx: _Tx, query: str, params: Any, key: str) -> bool:
        """One write through the tool's transaction (inside `execution()`): no retry, since a
        broken connection loses the transaction anyway; errors propagate to the engine."""
        try:
            cur = await tx.conn.execute(query, params)
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"PostgreSQL failed inside the transaction: {exc!r}", key=key
            ) from exc
        return cur.rowcount == 1

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
    ) -> bool:
        params = {
            "v": outcome,
            "ret": retention,
            "s": _b(scope),
            "k": _b(key),
            "o": owner,
            "f": fingerprint,
            "r": replaceable,
        }
        # One statement either way: the UPDATE of our claim, or (with a fingerprint) the
        # INSERT that also records a claim that expired and was purged meanwhile.
        query = self._q_complete if fingerprint is None else self._q_complete_late
        tx = self._tx_for(scope, key, owner)
        if tx is not None:
            if self.max_bytes is None:
                return await self._in_tx(tx, query, params, key)
            return await self._complete_in_tx(tx, query, params, key)

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            # A re-sent completion that finds our own completed record is answered yes by
            # the statement itself, so a retry needs no statement of its own.
            q = query
            if self.max_bytes is None:
                cur = await conn.execute(q, params)
                return cur.rowcount == 1
            try:
                async with conn.transaction():
                    cur = await conn.execute(q, params)
                    if cur.rowcount == 1 and await self._over_budget(conn):
                        raise _OverBudget
                    return cur.rowcount == 1
            except _OverBudget:
                pass
            # The tombstone takes no more than the room its claim kept for it.
            cur = await conn.execute(q, {**params, "v": self._not_kept(outcome, key)})
            return cur.rowcount == 1

        return await self._run(op, key)

    async def _complete_in_tx(self, tx: _Tx, query: str, params: Any, key: str) -> bool:
        """`_in_tx` under a budget: a completion over it is undone (to a savepoint, the tool's
        writes kept) and records a tombstone instead."""
        try:
            await tx.conn.execute(f"SAVEPOINT {_COMPLETE_SAVEPOINT}")
            cur = await tx.conn.execute(query, params)
            if cur.rowcount != 1 or not await self._over_budget(tx.conn):
                return cur.rowcount == 1
            await tx.conn.execute(f"ROLLBACK TO SAVEPOINT {_COMPLETE_SAVEPOINT}")
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"PostgreSQL failed inside the transaction: {exc!r}", key=key
            ) from exc
        return await self._in_tx(tx, query, {**params, "v": self._not_kept(params["v"], key)}, key)

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        params = (_b(scope), _b(key), owner)
        tx = self._tx_for(scope, key, owner)
        # Without `lapse`: the owner's claim, in progress or lapsed (an operator's release of
        # a lapsed one lets the next claim run the tool again). With it: a live claim only.
        delete = self._q_release_held if lapse else self._q_release
        if tx is not None:
            if lapse and await self._in_tx(tx, self._q_release_lapse, params, key):
                return True
            return await self._in_tx(tx, delete, params, key)

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            if lapse:  # LAPSED from now, for the keep it was claimed with (if any)
                cur = await conn.execute(self._q_release_lapse, params)
                if cur.rowcount == 1:
                    return True
            cur = await conn.execute(delete, params)
            return cur.rowcount == 1

        return await self._run(op, key)

    async def forget(self, scope: str, key: str, owner: str) -> bool:
        """Delete the record held by `owner`, in progress or completed: an operator's forced
        release (`idemtools keys release --force`); never part of the call path."""
        params = (_b(scope), _b(key), owner)

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            cur = await conn.execute(self._q_forget, params)
            return cur.rowcount == 1

        return await self._run(op, key)

    async def get(self, scope: str, key: str) -> Record | None:
        params = (_b(scope), _b(key))

        async def op(conn: AsyncConnection[Any], _retrying: bool) -> Record | None:
            cur = await conn.execute(self._q_get, params)
            row = await cur.fetchone()
            return None if row is None else self._record(row, key)

        return await self._run(op, key)

    @asynccontextmanager
    async def execution(self, scope: str, key: str, owner: str) -> AsyncIterator[_Tx]:
        """Run the block (the tool and its `complete`) in one transaction; commit on exit.

        The tool reaches the transaction through `current_connection()`. A failed commit
        raises (the engine then answers with an error and releases the claim). The tool runs
        after a savepoint: when it fails, the engine rolls back to it (`rollback()` of what
        this yields), so the error record commits without the failed attempt's writes. The
        connection is held for the whole block; at most `max_transactions` blocks hold one at a
        time, the others wait for a slot first (see the module notes), so short statements
        always find a connection.
        """
        await self._ensure_open()
        slots = self._transaction_slots
        try:
            await asyncio.wait_for(slots.acquire(), self.transaction_wait)
        except asyncio.TimeoutError:  # not the builtin on Python 3.10
            raise StoreUnavailableError(
                f"{self.max_transactions} PostgreSQL transactions ran for {self.transaction_wait}"
                " s without one ending; this call was not run",
                key=key,
            ) from None
        try:
            async with self._pool.connection() as conn, conn.transaction():
                tx = _Tx(self, scope, key, owner, conn)
                await conn.execute(f"SAVEPOINT {_TOOL_SAVEPOINT}")
                token = _current.set(tx)
                try:
                    yield tx
                finally:
                    _current.reset(token)
        except PoolTimeout as exc:
            raise StoreUnavailableError(
                f"PostgreSQL is unavailable (no connection within {self._pool.timeout} s)",
                key=key,
            ) from exc
        except psycopg.Error as exc:
            # Most often the COMMIT itself failed: nothing the tool wrote was kept.
            raise StoreUnavailableError(
                f"the PostgreSQL transaction failed: {exc!r}", key=key
            ) from exc
        finally:
            slots.release()

    async def aclose(self) -> None:
        """Close the pool if this store created it (`from_url`); idempotent."""
        self._closed = True
        if self._owns_pool and self._opened:
            self._opened = False
            await self._pool.close()


def _took_over(took: str | None, fingerprint: str, now: float) -> Record | None:
    """The lapsed claim a claim took over (its `took_over` JSON), as the take-over gave it."""
    if took is None:
        return None
    owner, claimed_at, lapsed_at, until = json.loads(took)
    return Record(
        Status.LAPSED,
        fingerprint,
        owner,
        max(0.0, float(until) - now),
        claimed_at=None if claimed_at is None else float(claimed_at),
        lapsed_at=float(lapsed_at),
    )


def _with_autocommit(kwargs: Any) -> Any:
    # psycopg_pool 3.3 also accepts a callable that builds the kwargs: that one is kept as is.
    return {**kwargs, "autocommit": True} if isinstance(kwargs, dict) else kwargs


def _is_connection_failure(exc: psycopg.OperationalError) -> bool:
    """True for errors that mean "this connection is dead", not "the statement failed"."""
    if isinstance(exc, psycopg.errors.AdminShutdown | psycopg.errors.CannotConnectNow):
        return True
    return exc.sqlstate is None or exc.sqlstate.startswith("08") or exc.sqlstate == "57P01"


def _broken(exc: Exception) -> bool:
    """A dead connection (not a pool timeout, not a failed statement): worth one retry."""
    return (
        isinstance(exc, psycopg.OperationalError)
        and not isinstance(exc, PoolTimeout)
        and _is_connection_failure(exc)
    )


def _corrupt(key: str, why: str) -> RecordCorruptError:
    return corrupt("PostgreSQL", key, why)


def _derived(table: str, suffix: str) -> sql.Identifier:
    """The identifier of an object named after the table (same schema)."""
    parts = table.split(".")
    return sql.Identifier(*parts[:-1], parts[-1] + suffix)


def _row_bytes(row: str) -> str:
    """SQL for the bytes a row counts under `max_bytes`; `row` is NEW, OLD or a table alias."""
    return (
        f"(octet_length({row}.scope) + octet_length({row}.key)"
        f" + octet_length({row}.fingerprint) + octet_length({row}.owner)"
        f" + coalesce(octet_length({row}.outcome), {TOMBSTONE_RESERVE}) + {RECORD_OVERHEAD})"
    )


def _budget_sql(table: str) -> str:
    """The usage table, its trigger function and trigger (see Byte budget in the notes)."""
    t, u = _table_ident(table), _derived(table, "_usage")
    f, trig = _derived(table, "_bytes"), sql.Identifier(table.split(".")[-1] + "_bytes")
    body = f"""
DECLARE d bigint := 0;
BEGIN
  IF TG_OP <> 'DELETE' THEN d := d + {_row_bytes("NEW")}; END IF;
  IF TG_OP <> 'INSERT' THEN d := d - {_row_bytes("OLD")}; END IF;
  IF d <> 0 THEN UPDATE {{u}} SET bytes = bytes + d WHERE id = 1; END IF;
  RETURN NULL;
END"""
    return (
        sql.SQL(
            "CREATE TABLE IF NOT EXISTS {u} "
            "(id int PRIMARY KEY CHECK (id = 1), bytes bigint NOT NULL);\n"
            f"INSERT INTO {{u}} (id, bytes) SELECT 1, coalesce(sum({_row_bytes('r')}), 0) "
            "FROM {t} AS r ON CONFLICT (id) DO NOTHING;\n"
            "CREATE OR REPLACE FUNCTION {f}() RETURNS trigger LANGUAGE plpgsql AS $idemtools$"
            + body.replace("{", "{{").replace("}", "}}").replace("{{u}}", "{u}")
            + "$idemtools$;\n"
            "DROP TRIGGER IF EXISTS {trig} ON {t};\n"
            "CREATE TRIGGER {trig} AFTER INSERT OR UPDATE OR DELETE ON {t} "
            "FOR EACH ROW EXECUTE FUNCTION {f}();\n"
        )
        .format(t=t, u=u, f=f, trig=trig)
        .as_string()
    )


def _queries(table: str) -> dict[str, str]:
    """Every statement, rendered once (identifiers quoted by psycopg, values as parameters)."""
    t = _table_ident(table)
    now = sql.SQL("statement_timestamp()")
    live = sql.SQL("expires_at > statement_timestamp()")
    # A live lease: `lease_end`, or for a row without one, `expires_at`.
    held = sql.SQL("coalesce(lease_end, expires_at) > statement_timestamp()")
    # What every read returns of a record (`PostgresStore._record`).
    fields = sql.SQL(
        """status, fingerprint, owner, outcome,
       extract(epoch FROM expires_at - statement_timestamp())::float8,
       extract(epoch FROM lease_end - statement_timestamp())::float8,
       extract(epoch FROM claimed_at)::float8, extract(epoch FROM lease_end)::float8,
       replaceable, took_over, extract(epoch FROM statement_timestamp())::float8"""
    )
    # A completion of our own completed record: the replaceable one is overwritten, any
    # other kept as it is (a re-sent completion, answered yes by the row it matched).
    kept = sql.SQL("r.status = 'c' AND NOT r.replaceable")
    completing = sql.SQL(
        """status = 'c',
    outcome = CASE WHEN {kept} THEN r.outcome ELSE %(v)s END,
    expires_at = CASE WHEN {kept} THEN r.expires_at
                      ELSE {now} + make_interval(secs => %(ret)s) END,
    replaceable = CASE WHEN {kept} THEN false ELSE %(r)s END,
    lease_end = NULL, claimed_at = NULL, took_over = NULL"""
    ).format(kept=kept, now=now)
    ours = sql.SQL("(r.status = 'p' OR (r.status = 'c' AND r.expires_at > {now}))").format(now=now)
    texts = {
        # One statement: take the key if it is free or expired, else read the live record.
        "claim": sql.SQL(
            """WITH ins AS (
    INSERT INTO {t} AS r (scope, key, status, fingerprint, owner, outcome, expires_at,
                          lease_end, claimed_at, replaceable)
    VALUES (%(s)s, %(k)s, 'p', %(f)s, %(o)s, NULL,
            {now} + make_interval(secs => %(lease)s + %(keep)s),
            {now} + make_interval(secs => %(lease)s), {now}, false)
    ON CONFLICT (scope, key) DO UPDATE
        SET status = 'p', fingerprint = EXCLUDED.fingerprint, owner = EXCLUDED.owner,
            outcome = NULL, expires_at = EXCLUDED.expires_at, lease_end = EXCLUDED.lease_end,
            claimed_at = EXCLUDED.claimed_at, replaceable = false, took_over = NULL
        WHERE r.expires_at <= {now}
    RETURNING 1
)
SELECT true, NULL::text, NULL::text, NULL::text, NULL::bytea, NULL::float8, NULL::float8,
       NULL::float8, NULL::float8, NULL::boolean, NULL::text, NULL::float8 FROM ins
UNION ALL
SELECT false, {fields}
FROM {t}
WHERE scope = %(s)s AND key = %(k)s AND {live} AND NOT EXISTS (SELECT 1 FROM ins)"""
        ),
        # A lapsed claim taken over: only while it is still the dead owner's, lapsed.
        "take_over": sql.SQL(
            """UPDATE {t} SET owner = %(o)s, claimed_at = {now},
    took_over = json_build_array(owner, extract(epoch FROM claimed_at),
        extract(epoch FROM lease_end), extract(epoch FROM expires_at))::text,
    lease_end = {now} + make_interval(secs => %(lease)s),
    expires_at = {now} + make_interval(secs => %(lease)s + %(keep)s)
WHERE scope = %(s)s AND key = %(k)s AND owner = %(dead)s AND fingerprint = %(f)s
    AND status = 'p' AND lease_end <= {now} AND {live}"""
        ),
        # The keep (expires_at - lease_end) follows the renewed lease.
        "renew": sql.SQL(
            """UPDATE {t} SET lease_end = {now} + make_interval(secs => %s),
    expires_at = {now} + make_interval(secs => %s) + (expires_at - coalesce(lease_end, expires_at))
WHERE scope = %s AND key = %s AND owner = %s AND status = 'p' AND {held}"""
        ),
        # Late completion: our claim, live or expired, as long as nobody re-claimed it; with a
        # fingerprint (never NULL from the engine) a claim that was purged is recorded anew.
        # Without one the INSERT's NOT NULL check fails, so the UPDATE path is tried alone.
        "complete": sql.SQL(
            """UPDATE {t} AS r SET {completing}
WHERE scope = %(s)s AND key = %(k)s AND owner = %(o)s AND {ours}"""
        ),
        "complete_late": sql.SQL(
            """INSERT INTO {t} AS r (scope, key, status, fingerprint, owner, outcome, expires_at,
                      replaceable)
VALUES (%(s)s, %(k)s, 'c', %(f)s, %(o)s, %(v)s, {now} + make_interval(secs => %(ret)s), %(r)s)
ON CONFLICT (scope, key) DO UPDATE SET {completing}
    WHERE r.owner = EXCLUDED.owner AND {ours}"""
        ),
        # The owner's claim, in progress or lapsed.
        "release": sql.SQL(
            """DELETE FROM {t}
WHERE scope = %s AND key = %s AND owner = %s AND status = 'p' AND {live}"""
        ),
        "release_held": sql.SQL(
            """DELETE FROM {t}
WHERE scope = %s AND key = %s AND owner = %s AND status = 'p' AND {held}"""
        ),
        "release_lapse": sql.SQL(
            """UPDATE {t} SET lease_end = {now}, expires_at = {now} + (expires_at - lease_end)
WHERE scope = %s AND key = %s AND owner = %s AND status = 'p' AND {held}
    AND expires_at > lease_end"""
        ),
        "forget": sql.SQL(
            """DELETE FROM {t}
WHERE scope = %s AND key = %s AND owner = %s AND {live}"""
        ),
        "get": sql.SQL(
            """SELECT {fields}
FROM {t} WHERE scope = %s AND key = %s AND {live}"""
        ),
        # Quota: serialise one scope's claims (released at COMMIT/ROLLBACK), then count.
        "scope_lock": sql.SQL("SELECT pg_advisory_xact_lock(%s)"),
        "usage": sql.SQL("SELECT bytes FROM {u} WHERE id = 1"),
        "scope_count": sql.SQL(
            """SELECT count(*), coalesce(bool_or(key = %(k)s), false)
FROM {t} WHERE scope = %(s)s AND {live}"""
        ),
        "purge": sql.SQL(
            """DELETE FROM {t} WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM {t} WHERE expires_at <= {now}
    ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED))"""
        ),
    }
    u = _derived(table, "_usage")
    return {
        name: query.format(
            t=t,
            now=now,
            live=live,
            u=u,
            held=held,
            fields=fields,
            completing=completing,
            ours=ours,
        ).as_string()
        for name, query in texts.items()
    }
