"""SQLiteStore: durable records in one SQLite file, shared safely by several processes on a host.

Standard library only (`sqlite3`). Survives restarts; right for a single host running one or a
few server processes (e.g. several workers behind one port). Not for network file systems:
SQLite's locking is only as good as the file system's, and WAL needs shared memory.

Concurrency design
------------------
* One `sqlite3.Connection` per store, opened lazily on first use (autocommit mode,
  ``isolation_level=None``, ``check_same_thread=False``) and guarded by a `threading.Lock`.
* Every operation runs in a worker thread via `anyio.to_thread.run_sync`, so the event loop never
  waits on disk or on another process's lock. A per-store `anyio.CapacityLimiter(1)` (made on
  first use) lets only one worker thread at a time work for this store: callers queue on the
  event loop rather than parking the shared thread pool on the lock. The thread lock still
  guards the connection against any other thread (and `aclose`).
* Between processes: WAL journal mode (readers never block the writer) and ``BEGIN IMMEDIATE``
  for claim/renew/complete/release, so the read-decide-write of a claim holds SQLite's write lock
  from the first read; two processes racing one key execute it once. A writer that finds the
  lock taken waits up to `busy_timeout` seconds (SQLite's busy handler), then the operation fails
  with `StoreUnavailableError`.
* Cancellation: a thread that started is always awaited to its end (anyio's default), so an
  operation is never half-applied; a claim whose caller was cancelled ends by its lease.
* Durability: SQLite's default ``synchronous=FULL`` is kept, so a committed record survives a
  power loss, not only a process crash.

Time
----
Wall-clock seconds from the injectable `clock` (default `time.time`): expiry instants are stored
as absolute times and must stay meaningful after a restart, which monotonic time does not. All
processes sharing a file share the host's clock. The clock is read after the write lock is
taken, so a decision uses the time at which it becomes visible.

Schema (created on first use, ``CREATE ... IF NOT EXISTS``)
------------------------------------------------------------
::

    CREATE TABLE IF NOT EXISTS idemtools_records (
        scope       BLOB NOT NULL,   -- UTF-8 (surrogatepass) of the scope string
        key         BLOB NOT NULL,   -- UTF-8 (surrogatepass) of the idempotency key
        status      TEXT NOT NULL CHECK (status IN ('in_progress', 'completed')),
        fingerprint TEXT NOT NULL,
        owner       TEXT NOT NULL,
        expires     REAL NOT NULL,   -- clock seconds: end of the record (see Lapsed claims)
        outcome     BLOB,            -- the outcome's JSON bytes once completed, else NULL
        lease_end   REAL,            -- a claim's lease end (NULL: completed, or an older row)
        claimed_at  REAL,            -- when the claim was made (NULL: completed, older row)
        replaceable INTEGER NOT NULL DEFAULT 0,  -- 1: the owner may overwrite the outcome
        took_over   TEXT,            -- JSON of the lapsed claim this claim took over, if any
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX IF NOT EXISTS idemtools_records_expires ON idemtools_records (expires);

Scope and key are stored as bytes because a key is any JSON string: it may hold NUL or lone
surrogates, which SQLite text (or Python's strict UTF-8 codec) would reject or mangle.
``SELECT CAST(key AS TEXT) ...`` reads them back in the sqlite3 shell.

The last four columns are added (``ALTER TABLE``) to a file whose table lacks them when a
connection opens it.

Lapsed claims
-------------
A claim made with `keep_lapsed` keeps its row `keep_lapsed` seconds past its lease: `lease_end`
is the lease's end, `expires` the end of the row (lease plus keep), so every bound, count and
cleanup, all written on `expires`, counts a lapsed claim like the claim it was. A row in
progress whose `lease_end` has passed is LAPSED. A row without a `lease_end` has no lapsed
bookkeeping: its `expires` is its lease's end, and it is a free key after it.

Expired records
---------------
A record whose `expires` has passed is dead: every operation ignores it and a claim replaces it.
Dead rows are deleted lazily and in bounded amounts: each claim that creates a record first
deletes at most `cleanup_batch` expired rows (oldest first), so no single call does unbounded
work. `purge_expired()` deletes all of them (in batches of `cleanup_batch`, each its own short
transaction; `limit=` bounds how many), for a periodic maintenance task.

Capacity
--------
Every claim that would create a record checks, inside its BEGIN IMMEDIATE transaction:

* `max_records_per_scope` (default None: no quota): live records of the claim's scope, counted
  on the ``(scope, expires)`` index that a store with a quota creates; a claim beyond it is
  refused with `QuotaExceededError`, other scopes unaffected;
* `max_bytes_per_scope` (default a tenth of `max_bytes`): the bytes of the scope's live rows,
  summed only once the file holds half its budget (below that nobody can be locked out);
* `max_records` (default None): live records in the file (walks the `expires` index,
  O(live records); None skips it);
* `max_bytes` (default 1 GiB): the estimated bytes of the rows in the file. Each row counts its
  scope and key twice (the table and the primary-key index), its fingerprint, owner and
  outcome, plus `RECORD_OVERHEAD` bytes (row and index headers, the `expires` index entry).
  The total is kept in a one-row table, ``idemtools_usage``, by triggers on the records table,
  so it is O(1) to read and every writer (another process, another version) is accounted for;
  each connection recounts it from the rows when it opens, so it cannot drift for long.
  Expired rows still on disk count until deleted; when the total would exceed the budget the
  claim first deletes expired rows (in `cleanup_batch` chunks, as many as it takes), so only
  live records can make the store full.

None of them is ever met by deleting a live record: the claim is refused with
`StoreFullError`. An outcome's size is known only at `complete`, after the tool ran; refusing it
then would let a retry run the tool again, so an in-progress row counts `TOMBSTONE_RESERVE`
bytes for its missing outcome, and a completion that does not fit (the file's budget or its
scope's) records a tombstone in that room instead: the budget is hard, and the retry is refused
with `idempotency_outcome_not_kept`, never run again. (The triggers that count this are named
``…_bytes2_*``; connecting drops any ``…_bytes_*`` ones, which count no room.)

Errors
------
Every driver error (`sqlite3.Error`, including "database is locked" after `busy_timeout`, a file
that is not a database, a path that cannot be opened) becomes `StoreUnavailableError` chained
``from`` the original. A failed connection setup is not kept: the next operation tries again.
After `aclose()` every operation raises `StoreUnavailableError`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Literal, TypeVar

import anyio
import anyio.to_thread

from ..errors import RecordCorruptError, RefusedError, StoreUnavailableError
from ..outcome import TOMBSTONE_RESERVE
from ._common import (
    at_least_one,
    encode,
    not_kept,
    quota_exceeded,
    scope_byte_quota_exceeded,
    share_of,
    store_full,
)
from .base import Claim, Record, Status, StoreInfo, describe

__all__ = ["RECORD_OVERHEAD", "SQLiteStore"]

T = TypeVar("T")

_TABLE = "idemtools_records"
_USAGE = "idemtools_usage"

RECORD_OVERHEAD = 96
"""Bytes counted per row besides its own data (see Capacity in the module docstring)."""


def _row_bytes(row: str) -> str:
    """SQL for the bytes a row counts; `row` is NEW or OLD in a trigger, or the table."""
    return (
        f"(2 * (length({row}.scope) + length({row}.key)) + length(CAST({row}.fingerprint AS BLOB))"
        f" + length(CAST({row}.owner AS BLOB))"
        f" + coalesce(length({row}.outcome), {TOMBSTONE_RESERVE})"
        f" + {RECORD_OVERHEAD})"
    )


_SCHEMA = (
    f"""
    CREATE TABLE IF NOT EXISTS {_TABLE} (
        scope       BLOB NOT NULL,
        key         BLOB NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('in_progress', 'completed')),
        fingerprint TEXT NOT NULL,
        owner       TEXT NOT NULL,
        expires     REAL NOT NULL,
        outcome     BLOB,
        lease_end   REAL,
        claimed_at  REAL,
        replaceable INTEGER NOT NULL DEFAULT 0,
        took_over   TEXT,
        PRIMARY KEY (scope, key)
    )
    """,
    f"CREATE INDEX IF NOT EXISTS {_TABLE}_expires ON {_TABLE} (expires)",
    # Byte accounting: one row holding the estimated bytes of every record row, kept by
    # triggers (renewals change only `expires`, so they fire none).
    f"CREATE TABLE IF NOT EXISTS {_USAGE} "
    "(id INTEGER PRIMARY KEY CHECK (id = 1), bytes INTEGER NOT NULL)",
    f"INSERT OR IGNORE INTO {_USAGE} (id, bytes) VALUES (1, 0)",
    # Version 1 of these triggers counted no tombstone room for a claim (see Capacity).
    f"DROP TRIGGER IF EXISTS {_TABLE}_bytes_insert",
    f"DROP TRIGGER IF EXISTS {_TABLE}_bytes_delete",
    f"DROP TRIGGER IF EXISTS {_TABLE}_bytes_update",
    f"CREATE TRIGGER IF NOT EXISTS {_TABLE}_bytes2_insert AFTER INSERT ON {_TABLE} BEGIN "
    f"UPDATE {_USAGE} SET bytes = bytes + {_row_bytes('NEW')} WHERE id = 1; END",
    f"CREATE TRIGGER IF NOT EXISTS {_TABLE}_bytes2_delete AFTER DELETE ON {_TABLE} BEGIN "
    f"UPDATE {_USAGE} SET bytes = bytes - {_row_bytes('OLD')} WHERE id = 1; END",
    f"CREATE TRIGGER IF NOT EXISTS {_TABLE}_bytes2_update "
    f"AFTER UPDATE OF scope, key, fingerprint, owner, outcome ON {_TABLE} BEGIN "
    f"UPDATE {_USAGE} SET bytes = bytes + {_row_bytes('NEW')} - {_row_bytes('OLD')} "
    "WHERE id = 1; END",
    # Recount on every connect: a file written by hand (or a REPLACE from a connection without
    # recursive_triggers) can never leave the total wrong for longer than one process start.
    f"UPDATE {_USAGE} SET bytes = "
    f"(SELECT coalesce(sum({_row_bytes(_TABLE)}), 0) FROM {_TABLE}) WHERE id = 1",
)

_LAPSED_COLUMNS = {
    "lease_end": "REAL",
    "claimed_at": "REAL",
    "replaceable": "INTEGER NOT NULL DEFAULT 0",
    "took_over": "TEXT",
}
"""Columns a file made before lapsed claims lacks: added when a connection opens it."""

_SCOPE_INDEX = f"CREATE INDEX IF NOT EXISTS {_TABLE}_scope_expires ON {_TABLE} (scope, expires)"
"""Created only by a store with a per-scope quota: it makes the quota's count an index range."""


def _size(scope: bytes, key: bytes, fingerprint: str, owner: str) -> int:
    """The bytes an in-progress row counts (its tombstone's room included): `_row_bytes`."""
    fp, ow = _b(fingerprint), _b(owner)
    return 2 * (len(scope) + len(key)) + len(fp) + len(ow) + RECORD_OVERHEAD + TOMBSTONE_RESERVE


_SELECT = (
    "SELECT status, fingerprint, owner, expires, outcome, lease_end, claimed_at, replaceable, "
    f"took_over FROM {_TABLE} WHERE scope = ? AND key = ? AND expires > ?"
)
# A live lease: `lease_end` when the row has one, else (a row without it) `expires`.
_HELD = (
    "scope = ? AND key = ? AND owner = ? AND status = 'in_progress' "
    "AND coalesce(lease_end, expires) > ?"
)


_b = encode

Row = tuple[str, str, str, float, "bytes | None", "float | None", "float | None", int, "str | None"]


def _took_over(took: str | None, fingerprint: str, now: float) -> Record | None:
    """The lapsed claim a claim took over (its `took_over` JSON), as the take-over gave it."""
    if took is None:
        return None
    owner, claimed_at, lapsed_at, until = json.loads(took)
    return Record(
        Status.LAPSED,
        fingerprint,
        owner,
        max(0.0, until - now),
        claimed_at=claimed_at,
        lapsed_at=lapsed_at,
    )


class SQLiteStore:
    """Records in a SQLite database file: durable, shared by the processes of one host.

    Args:
        path: the database file (created if missing; its directory must exist). ``":memory:"``
            works for experiments but is neither durable nor shared.
        max_records: live records at most; a claim beyond it is refused (`StoreFullError`),
            never evicted. None (the default): no record count; `max_bytes` bounds the file.
        max_bytes: estimated bytes of the rows in the file (see Capacity in the module
            docstring; default 1 GiB); a claim beyond it is refused (`StoreFullError`), and an
            outcome that does not fit is kept as a tombstone.
        max_records_per_scope: live records (in progress or completed) per scope at most; a
            claim beyond it is refused with `QuotaExceededError`, other scopes unaffected.
            None (the default): no quota (`max_bytes_per_scope` bounds records too).
        max_bytes_per_scope: bytes of live records per scope at most, as `max_bytes` counts
            them, checked once the file holds half its budget: a claim beyond it is refused
            with `QuotaExceededError`, an outcome that would take its scope past it is kept as
            a tombstone. Default: a tenth of `max_bytes`, so one caller flooding unique keys
            cannot lock the others out. None: no per-scope budget.
        clock: wall-clock seconds (default `time.time`); inject a fake to test expiry.
        busy_timeout: seconds to wait for another connection's write lock before failing with
            `StoreUnavailableError`.
        cleanup_batch: expired rows deleted at most per claim (and per `purge_expired` batch).
    """

    kind = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_records: int | None = None,
        max_bytes: int = 1 << 30,
        max_records_per_scope: int | None = None,
        max_bytes_per_scope: int | Literal["share"] | None = "share",
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 5.0,
        cleanup_batch: int = 100,
    ) -> None:
        at_least_one("max_records", max_records, none="unbounded")
        at_least_one("max_bytes", max_bytes)
        at_least_one("max_records_per_scope", max_records_per_scope, none="no quota")
        max_bytes_per_scope = share_of(max_bytes, max_bytes_per_scope)
        at_least_one("max_bytes_per_scope", max_bytes_per_scope, none="no budget")
        self.max_bytes_per_scope: int | None = max_bytes_per_scope
        if busy_timeout < 0:
            raise ValueError("busy_timeout must not be negative")
        if cleanup_batch < 1:
            raise ValueError("cleanup_batch must be at least 1")
        self.path = os.fspath(path)
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.max_records_per_scope = max_records_per_scope
        self.busy_timeout = busy_timeout
        self.cleanup_batch = cleanup_batch
        self._clock = clock
        self._conn: sqlite3.Connection | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None
        self.outcomes_not_kept = 0
        """Completions recorded as a tombstone because the outcome did not fit `max_bytes`."""

    def __repr__(self) -> str:
        return (
            f"SQLiteStore({self.path!r}, max_records={self.max_records!r}, "
            f"max_bytes={self.max_bytes!r}, max_records_per_scope={self.max_records_per_scope!r})"
        )

    @property
    def description(self) -> str:
        """The database file, for the operator's log (never sent to clients)."""
        return self.path

    def info(self) -> StoreInfo:
        """A SQLite file, bounded by `max_bytes` (and `max_records`, when set)."""
        return StoreInfo(
            kind=self.kind,
            label="SQLite database file",
            description=describe(self.kind, self.description),
            restarts="Records survive restarts (they are in the database file).",
            instances="Shared by the processes on one host that open the same file; not shared "
            "across hosts.",
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            max_records_per_scope=self.max_records_per_scope,
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            # A REPLACE (claim over an expired row) deletes that row; only with recursive
            # triggers does the deletion fire the byte-accounting trigger.
            conn.execute("PRAGMA recursive_triggers = ON")
            # WAL lets readers run beside the one writer; the mode is stored in the file, so
            # only the first connection ever changes it (":memory:" answers "memory").
            self._enter_wal(conn)
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                conn.execute(statement)
            have = {row[1] for row in conn.execute(f"PRAGMA table_info({_TABLE})")}
            for column, kind in _LAPSED_COLUMNS.items():
                if column not in have:  # a table made without the lapsed columns
                    conn.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {column} {kind}")
            if self.max_records_per_scope is not None:
                conn.execute(_SCOPE_INDEX)
            conn.execute("COMMIT")
        except BaseException:
            conn.close()
            raise
        return conn

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL, retrying a bounded while if another connection holds it.

        Changing the journal mode needs the file to itself, and SQLite answers "database is
        locked" at once rather than through the busy handler when another connection (say a
        second store opening the same new file) is busy: so we wait here, up to busy_timeout.
        """
        deadline = time.monotonic() + self.busy_timeout
        pause = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)  # a worker thread, never the event loop
            pause = min(pause * 2, 0.2)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` on the connection, in the calling (worker) thread, under the lock."""
        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"SQLite store {self.path!r} is closed")
            conn = self._conn
            try:
                if conn is None:
                    conn = self._conn = self._connect()
                return fn(conn)
            except BaseException as exc:
                # Never leave the shared connection inside a transaction, whatever failed.
                if conn is not None and conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreUnavailableError(
                        f"SQLite store {self.path!r} failed: {exc}"
                    ) from exc
                if isinstance(exc, UnicodeError):  # e.g. a surrogate in an owner or fingerprint
                    raise StoreUnavailableError(
                        f"SQLite store cannot encode a value: {exc}"
                    ) from exc
                raise

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return await anyio.to_thread.run_sync(self._call, fn, limiter=self._limiter)

    def _write(
        self, fn: Callable[[sqlite3.Connection, float], T]
    ) -> Callable[[sqlite3.Connection], T]:
        """Wrap `fn(conn, now)` in BEGIN IMMEDIATE ... COMMIT; `now` is read under the lock."""

        def txn(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            result = fn(conn, self._clock())  # on failure, _call rolls back
            conn.execute("COMMIT")
            return result

        return txn

    @staticmethod
    def _record(row: Row, now: float) -> Record:
        status, fingerprint, owner, expires, outcome, lease_end, claimed_at, replaceable, _ = row
        try:
            state = Status(status)
        except ValueError:
            # A row this release cannot read (another release's status?): never run again.
            raise RecordCorruptError(
                f"the idempotency record for this key in SQLite has status {status!r}, which "
                "this release cannot read; the call was not run"
            ) from None
        if state is Status.LAPSED:
            raise RecordCorruptError(  # lapsed is derived, never stored
                "the idempotency record for this key in SQLite has status 'lapsed', which "
                "this release never writes; the call was not run"
            )
        lapsed = state is Status.IN_PROGRESS and lease_end is not None and lease_end <= now
        if state is Status.COMPLETED:
            lease_end = claimed_at = None  # a claim's bookkeeping, if any was left
        return Record(
            status=Status.LAPSED if lapsed else state,
            fingerprint=fingerprint,
            owner=owner,
            remaining=max(0.0, (expires if lapsed or lease_end is None else lease_end) - now),
            outcome=None if outcome is None else bytes(outcome),
            claimed_at=claimed_at,
            lapsed_at=lease_end if lapsed else None,
            replaceable=bool(replaceable),
        )

    def _delete_expired(
        self, conn: sqlite3.Connection, now: float, batch: int | None = None
    ) -> int:
        cur = conn.execute(
            f"DELETE FROM {_TABLE} WHERE rowid IN "
            f"(SELECT rowid FROM {_TABLE} WHERE expires <= ? ORDER BY expires LIMIT ?)",
            (now, self.cleanup_batch if batch is None else batch),
        )
        return cur.rowcount

    # -- the protocol ------------------------------------------------------------------------

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
        s, k = _b(scope), _b(key)
        keep = max(0.0, keep_lapsed)

        def op(conn: sqlite3.Connection, now: float) -> Claim | RefusedError:
            row = conn.execute(_SELECT, (s, k, now)).fetchone()
            if row is not None:
                record = self._record(row, now)
                if record.status is Status.IN_PROGRESS and record.owner == owner:
                    # Ours already: a re-sent claim, answered as the first was.
                    return Claim(claimed=True, lapsed=_took_over(row[8], fingerprint, now))
                if record.status is not Status.LAPSED or record.fingerprint != fingerprint:
                    return Claim(claimed=False, existing=record)
                # Taken over: the same row, a new owner (no more room than it held).
                took = json.dumps([record.owner, record.claimed_at, record.lapsed_at, row[3]])
                conn.execute(
                    f"UPDATE {_TABLE} SET owner = ?, lease_end = ?, expires = ?, claimed_at = ?, "
                    "took_over = ? WHERE scope = ? AND key = ?",
                    (owner, now + lease, now + lease + keep, now, took, s, k),
                )
                return Claim(claimed=True, lapsed=record)
            self._delete_expired(conn, now)
            # Refusals are returned, not raised: the expired rows deleted above stay committed.
            refused = self._refusal(conn, now, s, _size(s, k, fingerprint, owner), key)
            if refused is not None:
                return refused
            conn.execute(
                f"INSERT OR REPLACE INTO {_TABLE} "
                "(scope, key, status, fingerprint, owner, expires, outcome, lease_end, "
                "claimed_at, replaceable, took_over) "
                "VALUES (?, ?, 'in_progress', ?, ?, ?, NULL, ?, ?, 0, NULL)",
                (s, k, fingerprint, owner, now + lease + keep, now + lease, now),
            )
            return Claim(claimed=True)

        result = await self._run(self._write(op))
        if isinstance(result, RefusedError):
            raise result
        return result

    def _refusal(
        self, conn: sqlite3.Connection, now: float, scope: bytes, size: int, key: str
    ) -> RefusedError | None:
        """Why a new record of `size` bytes in `scope` may not be created now, if it may not.

        The quota comes first: a caller over its own quota is told so, whatever the state of
        the store as a whole. Runs inside the claim's write transaction, so the answer holds
        until the record is inserted.
        """
        quota = self.max_records_per_scope
        if quota is not None:
            (mine,) = conn.execute(
                f"SELECT count(*) FROM {_TABLE} WHERE scope = ? AND expires > ?", (scope, now)
            ).fetchone()
            if mine >= quota:
                return quota_exceeded(quota, key)
        if self.max_records is not None:
            (live,) = conn.execute(
                f"SELECT count(*) FROM {_TABLE} WHERE expires > ?", (now,)
            ).fetchone()
            if live >= self.max_records:
                return store_full("SQLite", self.max_records, "live records", key)
        used = self._bytes(conn)
        # Over budget: expired rows still count until deleted, so delete them first (as many
        # as it takes; each row is deleted once, so the work is paid for by the claims that
        # wrote them).
        while used + size > self.max_bytes and self._delete_expired(conn, now):
            used = self._bytes(conn)
        if used + size > self.max_bytes:
            return store_full("SQLite", self.max_bytes, "bytes of records", key)
        share = self.max_bytes_per_scope
        if share is not None and self._scope_bytes(conn, now, scope, used, size) + size > share:
            return scope_byte_quota_exceeded(share, key)
        return None

    def _scope_bytes(
        self, conn: sqlite3.Connection, now: float, scope: bytes, used: int, size: int
    ) -> int:
        """The bytes of `scope`'s live rows; 0 (not counted) while the file is under half its
        budget: nobody can be locked out then, and the sum walks the scope's rows."""
        if used + size <= self.max_bytes // 2:
            return 0
        (mine,) = conn.execute(
            f"SELECT coalesce(sum({_row_bytes(_TABLE)}), 0) FROM {_TABLE} "
            "WHERE scope = ? AND expires > ?",
            (scope, now),
        ).fetchone()
        return int(mine)

    @staticmethod
    def _bytes(conn: sqlite3.Connection) -> int:
        (used,) = conn.execute(f"SELECT bytes FROM {_USAGE} WHERE id = 1").fetchone()
        return int(used)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        s, k = _b(scope), _b(key)

        def op(conn: sqlite3.Connection, now: float) -> bool:
            # The keep (expires - lease_end) follows the lease: SQLite reads the old values.
            cur = conn.execute(
                f"UPDATE {_TABLE} SET lease_end = ?, "
                "expires = ? + expires - coalesce(lease_end, expires) "
                f"WHERE {_HELD}",
                (now + lease, now + lease, s, k, owner, now),
            )
            return cur.rowcount == 1

        return await self._run(self._write(op))

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
        s, k, data = _b(scope), _b(key), bytes(outcome)
        flag = int(replaceable)

        def op(conn: sqlite3.Connection, now: float) -> bool:
            nonlocal data
            done = conn.execute(
                f"SELECT owner, replaceable, length(outcome) FROM {_TABLE} "
                "WHERE scope = ? AND key = ? AND status = 'completed' AND expires > ?",
                (s, k, now),
            ).fetchone()
            if done is not None:
                if done[0] != owner:
                    return False  # a completed record is final...
                if not done[1]:
                    return True  # ...and ours already: a re-sent completion
                data = self._fitting(conn, now, s, k, data, len(data) - (done[2] or 0), key)
                conn.execute(
                    f"UPDATE {_TABLE} SET outcome = ?, expires = ?, replaceable = ? "
                    "WHERE scope = ? AND key = ?",
                    (data, now + retention, flag, s, k),
                )
                return True
            ours = conn.execute(
                f"SELECT 1 FROM {_TABLE} WHERE scope = ? AND key = ? AND owner = ? "
                "AND status = 'in_progress'",
                (s, k, owner),
            ).fetchone()
            if ours is None and fingerprint is None:
                return False
            # What the completed row adds: the outcome in place of the claim's reserved room,
            # or (late, the claim deleted meanwhile) a whole row.
            grows = len(data) - TOMBSTONE_RESERVE
            if ours is None:
                grows += _size(s, k, fingerprint or "", owner)
            data = self._fitting(conn, now, s, k, data, grows, key)
            # Late completion: our claim, live or expired, as long as nobody re-claimed it.
            cur = conn.execute(
                f"UPDATE {_TABLE} SET status = 'completed', outcome = ?, expires = ?, "
                "lease_end = NULL, claimed_at = NULL, took_over = NULL, replaceable = ? "
                "WHERE scope = ? AND key = ? AND owner = ? AND status = 'in_progress'",
                (data, now + retention, flag, s, k, owner),
            )
            if cur.rowcount == 1 or fingerprint is None:
                return cur.rowcount == 1
            # Our expired claim was deleted by a cleanup: record it anew unless a row exists.
            cur = conn.execute(
                f"INSERT OR IGNORE INTO {_TABLE} "
                "(scope, key, status, fingerprint, owner, expires, outcome, replaceable) "
                "VALUES (?, ?, 'completed', ?, ?, ?, ?, ?)",
                (s, k, fingerprint, owner, now + retention, data, flag),
            )
            return cur.rowcount == 1

        return await self._run(self._write(op))

    def _fitting(
        self,
        conn: sqlite3.Connection,
        now: float,
        s: bytes,
        k: bytes,
        data: bytes,
        grows: int,
        key: str,
    ) -> bytes:
        """`data`, or its tombstone when the file has no room for it under `max_bytes`.

        Expired rows (other than this key's own, which the completion may still need) are
        deleted first, as a claim does. The tombstone fits in the room the claim kept for it;
        a late completion whose claim row was deleted has none, and its tombstone is the one
        write let past the budget (a row of a few hundred bytes) rather than lose the record.
        """
        used = self._bytes(conn)
        while used + grows > self.max_bytes and self._delete_expired_but(conn, now, s, k):
            used = self._bytes(conn)
        share = self.max_bytes_per_scope
        if used + grows <= self.max_bytes and (
            share is None or self._scope_bytes(conn, now, s, used, grows) + grows <= share
        ):
            return data
        self.outcomes_not_kept += 1
        return not_kept(f"SQLite store {self.path}", data, self.max_bytes, key)

    def _delete_expired_but(self, conn: sqlite3.Connection, now: float, s: bytes, k: bytes) -> int:
        cur = conn.execute(
            f"DELETE FROM {_TABLE} WHERE rowid IN (SELECT rowid FROM {_TABLE} "
            "WHERE expires <= ? AND NOT (scope = ? AND key = ?) ORDER BY expires LIMIT ?)",
            (now, s, k, self.cleanup_batch),
        )
        return cur.rowcount

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        s, k = _b(scope), _b(key)

        def op(conn: sqlite3.Connection, now: float) -> bool:
            if lapse:  # LAPSED from now, for the keep it was claimed with (if any)
                cur = conn.execute(
                    f"UPDATE {_TABLE} SET lease_end = ?, expires = ? + expires - lease_end "
                    f"WHERE {_HELD} AND expires > lease_end",
                    (now, now, s, k, owner, now),
                )
                if cur.rowcount == 1:
                    return True
                cur = conn.execute(f"DELETE FROM {_TABLE} WHERE {_HELD}", (s, k, owner, now))
                return cur.rowcount == 1
            # The owner's claim, in progress or lapsed (an operator's release of a lapsed one
            # lets the next claim run the tool again).
            cur = conn.execute(
                f"DELETE FROM {_TABLE} WHERE scope = ? AND key = ? AND owner = ? "
                "AND status = 'in_progress' AND expires > ?",
                (s, k, owner, now),
            )
            return cur.rowcount == 1

        return await self._run(self._write(op))

    async def forget(self, scope: str, key: str, owner: str) -> bool:
        """Delete the record held by `owner`, in progress or completed: an operator's forced
        release (`idemtools keys release --force`); never part of the call path."""
        s, k = _b(scope), _b(key)

        def op(conn: sqlite3.Connection, now: float) -> bool:
            cur = conn.execute(
                f"DELETE FROM {_TABLE} WHERE scope = ? AND key = ? AND owner = ? AND expires > ?",
                (s, k, owner, now),
            )
            return cur.rowcount == 1

        return await self._run(self._write(op))

    async def get(self, scope: str, key: str) -> Record | None:
        s, k = _b(scope), _b(key)

        def op(conn: sqlite3.Connection) -> Record | None:
            now = self._clock()
            row = conn.execute(_SELECT, (s, k, now)).fetchone()
            return None if row is None else self._record(row, now)

        return await self._run(op)

    def for_lease_keeper(self) -> SQLiteStore:
        """The same file through a connection of its own, for the lease keeper's thread (this
        store's worker limiter belongs to the event loop that first used it)."""
        return SQLiteStore(
            self.path,
            max_records=self.max_records,
            clock=self._clock,
            busy_timeout=self.busy_timeout,
            cleanup_batch=self.cleanup_batch,
            max_bytes=self.max_bytes,
            max_records_per_scope=self.max_records_per_scope,
            max_bytes_per_scope=self.max_bytes_per_scope,
        )

    async def aclose(self) -> None:
        """Close the connection; later operations raise `StoreUnavailableError`. Idempotent."""

        def op() -> None:
            with self._lock:
                self._closed = True
                conn, self._conn = self._conn, None
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()

        await anyio.to_thread.run_sync(op)

    # -- maintenance -------------------------------------------------------------------------

    async def purge_expired(self, *, limit: int | None = None) -> int:
        """Delete expired records, at most `limit` (None: all of them), `cleanup_batch` rows
        per transaction, oldest first; return how many."""
        total = 0
        while limit is None or total < limit:
            batch = self.cleanup_batch if limit is None else min(self.cleanup_batch, limit - total)

            def op(conn: sqlite3.Connection, now: float, batch: int = batch) -> int:
                return self._delete_expired(conn, now, batch)

            deleted = await self._run(self._write(op))
            total += deleted
            if deleted < batch:
                break
        return total

    async def bytes_used(self) -> int:
        """The estimated bytes of the rows in the file, as `max_bytes` counts them."""
        return await self._run(self._bytes)

    async def count_live(self) -> int:
        """How many unexpired records (in progress or completed) the database holds."""

        def op(conn: sqlite3.Connection) -> int:
            (live,) = conn.execute(
                f"SELECT count(*) FROM {_TABLE} WHERE expires > ?", (self._clock(),)
            ).fetchone()
            return int(live)

        return await self._run(op)
