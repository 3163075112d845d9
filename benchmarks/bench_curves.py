"""Curves, not only points: store cost against live records, throughput
against concurrency, each beside the raw ceiling of the same database, drawn into docs/img/.

    python benchmarks/bench_curves.py [--quick] [--sizes 1000,100000,1000000]
        [--levels 1,2,4,...,256] [--seconds 1.0] [--samples 300] [--plots docs/img]

Needs `pip install -e '.[redis,postgres,bench]'` (matplotlib), the `redis-server` binary (a
private one is started on a free port, so the shared Redis never holds a million records) and
`redis-benchmark` (optional: one more Redis ceiling), and PostgreSQL at IDEMTOOLS_POSTGRES_URL
(default postgresql://postgres@127.0.0.1:5432/test; private per-run table names, dropped at the
end). Prints, in one run:

1. Median µs per operation (claim of a new key, renew, complete, replay claim, get) of every
   store with 1 k, 100 k and 1 M live records, and each size's ratio to the 1 k figure; beside
   them the raw claim of the same database (a bare EVALSHA / INSERT … ON CONFLICT / sqlite3
   transaction) at the same size, so growth that is the database's own shows as such.
   PostgreSQL runs this part with `synchronous_commit=off` (store and raw alike): the commit's
   WAL flush does not depend on the record count, and on a shared disk its noise hides what does.
2. First executions (claim + complete of a new key) per second against concurrent callers
   (1 … 256) for Redis, PostgreSQL and SQLite, each beside the same two round trips done raw
   with the same client library and connections, and the ratio store / raw; for Redis also
   redis-benchmark sending the same scripts, for SQLite one plain sqlite3 loop. Store, raw and
   ceilings alternate in short slices at every level, so drift hits them alike.

and writes docs/img/curves-records.png and docs/img/curves-concurrency.png. Absolute numbers on
a shared 2-core machine are noisy: read the ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import os
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import psycopg
import redis
import redis.asyncio
from _redis_server import private_redis
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from idemtools.outcome import Outcome
from idemtools.stores.memory import MemoryStore
from idemtools.stores.postgres import PostgresStore
from idemtools.stores.redis import RedisStore
from idemtools.stores.sqlite import SQLiteStore

POSTGRES_URL = (
    os.environ.get("IDEMTOOLS_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
)
RUN = uuid.uuid4().hex[:8]
TABLE_PREFIX = f"idemtools_curves_{RUN}_"
SCOPE = "b" * 64
FP = "f" * 64
OUTCOME = Outcome(
    result={"content": [{"type": "text", "text": "order A-1001 paid: 42.00 EUR"}], "isError": False}
).to_bytes()
OPS = ("claim", "renew", "complete", "replay", "get")
WARMUP = 30  # unmeasured rounds per store and size
SLICES = 4  # alternations of store and raw per throughput point
PG_POOL = 16  # connections per pool (store and raw alike): the shared server allows 100 in all
STORE_COLORS = {
    "MemoryStore": "tab:green",
    "SQLiteStore": "tab:orange",
    "RedisStore": "tab:red",
    "PostgresStore": "tab:blue",
}


# -- raw equivalents: the same round trips without idemtools ------------------------------------

# A claim and a completion in their barest Lua form: what one EVALSHA costs on this Redis.
RAW_CLAIM_LUA = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 's', 'p', 'f', ARGV[1], 'o', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
RAW_COMPLETE_LUA = """
redis.call('HSET', KEYS[1], 's', 'c', 'v', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


class RawRedis:
    def __init__(self, url: str, max_connections: int | None = None) -> None:
        self.client = redis.asyncio.Redis.from_url(url, max_connections=max_connections)
        self.claim_sha = ""
        self.complete_sha = ""

    async def load(self) -> None:
        self.claim_sha = await self.client.script_load(RAW_CLAIM_LUA)
        self.complete_sha = await self.client.script_load(RAW_COMPLETE_LUA)

    async def claim(self, key: str) -> None:
        claimed = await self.client.evalsha(self.claim_sha, 1, key, FP, "owner", 60_000)
        assert claimed == 1

    async def complete(self, key: str) -> None:
        await self.client.evalsha(self.complete_sha, 1, key, OUTCOME, 3_600_000)


class RawPostgres:
    """The store's two statements in their plainest form, on the store's own table."""

    def __init__(self, table: str, pool: AsyncConnectionPool[Any]) -> None:
        t = sql.Identifier(table)
        self.pool = pool
        self.q_claim = sql.SQL(
            "INSERT INTO {} (scope, key, status, fingerprint, owner, expires_at) "
            "VALUES (%s, %s, 'p', %s, 'owner', now() + interval '60 s') "
            "ON CONFLICT (scope, key) DO NOTHING"
        ).format(t)
        self.q_complete = sql.SQL(
            "UPDATE {} SET status = 'c', outcome = %s, expires_at = now() + interval '1 h' "
            "WHERE scope = %s AND key = %s AND owner = 'owner' AND status = 'p'"
        ).format(t)

    async def claim(self, key: str) -> None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self.q_claim, (SCOPE.encode(), key.encode(), FP))
            assert cur.rowcount == 1

    async def complete(self, key: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(self.q_complete, (OUTCOME, SCOPE.encode(), key.encode()))


_RAW_SQLITE_SCHEMA = """CREATE TABLE IF NOT EXISTS idemtools_records (
    scope BLOB NOT NULL, key BLOB NOT NULL, status TEXT NOT NULL, fingerprint TEXT NOT NULL,
    owner TEXT NOT NULL, expires REAL NOT NULL, outcome BLOB, PRIMARY KEY (scope, key))"""


class RawSQLite:
    """sqlite3 with the store's threading model (one connection, one worker thread at a time,
    WAL, autocommit, BEGIN IMMEDIATE per write) and nothing else: no triggers, no checks."""

    def __init__(self, path: Path | str, *, schema: bool = True) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL").fetchone()
        if schema:
            self.conn.execute(_RAW_SQLITE_SCHEMA)
        self.limiter = anyio.CapacityLimiter(1)

    def claim_sync(self, key: str) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        row = c.execute(
            "SELECT status FROM idemtools_records WHERE scope = ? AND key = ? AND expires > ?",
            (SCOPE.encode(), key.encode(), time.time()),
        ).fetchone()
        assert row is None
        c.execute(
            "INSERT OR REPLACE INTO idemtools_records "
            "(scope, key, status, fingerprint, owner, expires, outcome) "
            "VALUES (?, ?, 'in_progress', ?, 'owner', ?, NULL)",
            (SCOPE.encode(), key.encode(), FP, time.time() + 60),
        )
        c.execute("COMMIT")

    def complete_sync(self, key: str) -> None:
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        c.execute(
            "UPDATE idemtools_records SET status = 'completed', outcome = ?, expires = ? "
            "WHERE scope = ? AND key = ? AND owner = 'owner' AND status = 'in_progress'",
            (OUTCOME, time.time() + 3600, SCOPE.encode(), key.encode()),
        )
        c.execute("COMMIT")

    async def claim(self, key: str) -> None:
        await anyio.to_thread.run_sync(self.claim_sync, key, limiter=self.limiter)

    async def complete(self, key: str) -> None:
        await anyio.to_thread.run_sync(self.complete_sync, key, limiter=self.limiter)

    def close(self) -> None:
        self.conn.close()


# -- 1. per-operation cost against live records ---------------------------------------------------


def med_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000.0


@dataclass
class SizeRow:
    store: str
    size: int
    ops: dict[str, float]  # median µs per operation
    raw_claim: float | None  # median µs of the database's bare claim at this size
    fill_s: float


async def per_op(
    store: Any, raw: Callable[[str], Awaitable[None]] | None, tag: str, samples: int
) -> tuple[dict[str, float], float | None]:
    """Median µs of each operation and of the raw claim, interleaved per key so that drift
    (other people's load on this machine) hits all of them alike."""
    times: dict[str, list[int]] = {op: [] for op in OPS}
    raw_times: list[int] = []
    clock = time.perf_counter_ns
    for i in range(samples):
        if raw is not None:
            t = clock()
            await raw(f"raw-{tag}-{i}")
            raw_times.append(clock() - t)
        key = f"{tag}-{i}"
        t0 = clock()
        claim = await store.claim(SCOPE, key, FP, "owner", 60)
        t1 = clock()
        renewed = await store.renew(SCOPE, key, "owner", 60)
        t2 = clock()
        completed = await store.complete(SCOPE, key, "owner", OUTCOME, 3600, fingerprint=FP)
        t3 = clock()
        replay = await store.claim(SCOPE, key, FP, "other", 60)
        t4 = clock()
        record = await store.get(SCOPE, key)
        t5 = clock()
        assert claim.claimed and renewed and completed, (claim, renewed, completed)
        assert replay.existing is not None and replay.existing.outcome == OUTCOME
        assert record is not None and record.outcome == OUTCOME
        for op, took in zip(OPS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4), strict=True):
            times[op].append(took)
    medians = {op: med_us(values) for op, values in times.items()}
    return medians, (med_us(raw_times) if raw_times else None)


async def fill_memory(store: MemoryStore, start: int, stop: int) -> None:
    # Through the API: MemoryStore's entries are its own business, and 1 M claims take seconds.
    for i in range(start, stop):
        key = f"fill-{i}"
        await store.claim(SCOPE, key, FP, "owner", 3600)
        await store.complete(SCOPE, key, "owner", OUTCOME, 3600)


def fill_sqlite(path: Path, start: int, stop: int) -> None:
    """executemany into the store's own table (its byte-accounting triggers fire as usual)."""
    conn = sqlite3.connect(path, timeout=30)
    conn.execute("PRAGMA recursive_triggers = ON")
    expires = time.time() + 3600
    with conn:
        conn.executemany(
            "INSERT INTO idemtools_records "
            "(scope, key, status, fingerprint, owner, expires, outcome) "
            "VALUES (?, ?, 'completed', ?, 'owner', ?, ?)",
            (
                (SCOPE.encode(), f"fill-{i}".encode(), FP, expires, OUTCOME)
                for i in range(start, stop)
            ),
        )
    conn.close()


# Bulk fill: one EVALSHA per thousand records (the pipeline of HSET + PEXPIRE per record costs
# redis-py ~15 µs of Python per record; this costs the key's SHA-256 and little else).
FILL_LUA = """
for i, k in ipairs(KEYS) do
  redis.call('HSET', k, 's', 'c', 'f', ARGV[1], 'o', 'owner', 'v', ARGV[2])
  redis.call('PEXPIRE', k, 3600000)
end
return #KEYS
"""


async def fill_redis(url: str, store: RedisStore, start: int, stop: int) -> None:
    """The store's own record layout (hash s/f/o/v with an expiry) under the store's key names."""
    client = redis.asyncio.Redis.from_url(url)
    sha = await client.script_load(FILL_LUA)
    batch = 1000
    for lo in range(start, stop, batch):
        names = [store.key_name(SCOPE, f"fill-{i}") for i in range(lo, min(lo + batch, stop))]
        assert await client.evalsha(sha, len(names), *names, FP, OUTCOME) == len(names)
    await client.aclose()


def fill_postgres(table: str, start: int, stop: int) -> None:
    """COPY … FROM STDIN into the store's table, then ANALYZE: a million rows in seconds."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn, conn.cursor() as cur:
        copy_sql = sql.SQL(
            "COPY {} (scope, key, status, fingerprint, owner, outcome, expires_at) FROM STDIN"
        ).format(sql.Identifier(table))
        row = conn.execute("SELECT now() + interval '1 hour'").fetchone()
        assert row is not None
        with cur.copy(copy_sql) as copy:
            copy.set_types(["bytea", "bytea", "text", "text", "text", "bytea", "timestamptz"])
            for i in range(start, stop):
                copy.write_row(
                    (SCOPE.encode(), f"fill-{i}".encode(), "c", FP, "owner", OUTCOME, row[0])
                )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


async def records_curves(
    sizes: list[int], samples: int, redis_url: str, tmp: Path
) -> list[SizeRow]:
    rows: list[SizeRow] = []

    async def walk(
        name: str,
        store: Any,
        fill: Callable[[int, int], Awaitable[None]],
        raw: Callable[[str], Awaitable[None]] | None,
    ) -> None:
        have = 0
        for size in sizes:
            t = time.perf_counter()
            await fill(have, size)
            took = time.perf_counter() - t
            have = size
            gc.collect()
            await per_op(store, raw, f"w{size}", WARMUP)  # fresh connections, caches, plans
            ops, raw_us = await per_op(store, raw, f"m{size}", samples)
            rows.append(SizeRow(name, size, ops, raw_us, took))
            print(f"  {name} at {size:,} records: filled in {took:.1f} s", file=sys.stderr)

    memory = MemoryStore(
        max_records=max(sizes) + 10 * (samples + WARMUP),
        max_bytes=16 << 30,
        max_records_per_scope=None,  # one scope fills the whole store here
        max_bytes_per_scope=None,
    )
    await walk("MemoryStore", memory, functools.partial(fill_memory, memory), None)
    memory = MemoryStore()  # the million records go before the next store is measured
    gc.collect()

    path = tmp / "records.db"
    lite = SQLiteStore(path, max_bytes=64 << 30, max_bytes_per_scope=None)
    await lite.get(SCOPE, "schema")  # the store creates its schema on first use
    raw_lite = RawSQLite(path, schema=False)  # the same file and table, beside the store
    try:
        await walk(
            "SQLiteStore",
            lite,
            lambda a, b: asyncio.to_thread(fill_sqlite, path, a, b),
            raw_lite.claim,
        )
    finally:
        raw_lite.close()
        await lite.aclose()

    rstore = RedisStore.from_url(redis_url, prefix=f"curves-{RUN}:")
    raw_redis = RawRedis(redis_url)
    await raw_redis.load()
    try:
        await walk(
            "RedisStore", rstore, lambda a, b: fill_redis(redis_url, rstore, a, b), raw_redis.claim
        )
    finally:
        await raw_redis.client.aclose()
        await rstore.aclose()

    table = f"{TABLE_PREFIX}records"
    # Without the commit's WAL flush (store and raw alike): on this shared disk the flush costs
    # 1-5 ms at random and would drown what the record count changes (the index lookups).
    no_flush = "-c synchronous_commit=off"
    pstore = PostgresStore.from_url(
        POSTGRES_URL, table=table, min_size=2, max_size=2, options=no_flush
    )
    await pstore.create_schema()
    raw_pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        POSTGRES_URL,
        min_size=1,
        max_size=1,
        kwargs={"autocommit": True, "options": no_flush},
        open=False,
    )
    await raw_pool.open()
    try:
        await walk(
            "PostgresStore",
            pstore,
            lambda a, b: asyncio.to_thread(fill_postgres, table, a, b),
            RawPostgres(table, raw_pool).claim,
        )
    finally:
        await raw_pool.close()
        await pstore.drop_schema()
        await pstore.aclose()
    return rows


# -- 2. throughput against concurrency -----------------------------------------------------------


@dataclass
class Curve:
    label: str
    points: dict[int, float] = field(default_factory=dict)  # callers -> first executions / s


async def rate(
    unit: Callable[[str], Awaitable[None]], callers: int, seconds: float, tag: str
) -> float:
    """First executions per second with `callers` concurrent callers for about `seconds`."""
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(c: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < stop:
            await unit(f"{tag}-{c}-{i}")
            i += 1
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(callers)))
    return done / (time.perf_counter() - started)


def store_unit(store: Any) -> Callable[[str], Awaitable[None]]:
    async def unit(key: str) -> None:
        claim = await store.claim(SCOPE, key, FP, "owner", 60)
        assert claim.claimed
        assert await store.complete(SCOPE, key, "owner", OUTCOME, 3600, fingerprint=FP)

    return unit


def raw_unit(raw: Any) -> Callable[[str], Awaitable[None]]:
    async def unit(key: str) -> None:
        await raw.claim(key)
        await raw.complete(key)

    return unit


async def pair(
    store: Curve,
    raw: Curve,
    store_op: Callable[[str], Awaitable[None]],
    raw_op: Callable[[str], Awaitable[None]],
    levels: list[int],
    seconds: float,
    ceilings: Sequence[tuple[Curve, Ceiling]] = (),
) -> None:
    await rate(store_op, 4, min(0.3, seconds), "warm-s")
    await rate(raw_op, 4, min(0.3, seconds), "warm-r")
    for n in levels:
        # Store and raw alternate in SLICES short runs at every level, so that other people's
        # load on this machine hits both alike; each point is the mean of its slices.
        mine, bare = [], []
        tops: list[list[float]] = [[] for _ in ceilings]
        for k in range(SLICES):
            mine.append(await rate(store_op, n, seconds / SLICES, f"s{n}-{k}"))
            bare.append(await rate(raw_op, n, seconds / SLICES, f"r{n}-{k}"))
            for top, (_, ceiling) in zip(tops, ceilings, strict=True):
                top.append(await asyncio.to_thread(ceiling, n, seconds / SLICES))
        store.points[n], raw.points[n] = statistics.fmean(mine), statistics.fmean(bare)
        for top, (curve, _) in zip(tops, ceilings, strict=True):
            curve.points[n] = statistics.fmean(top)
        print(
            f"  {store.label} at {n} callers: {store.points[n]:.0f}/s, raw {raw.points[n]:.0f}/s",
            file=sys.stderr,
        )


Ceiling = Callable[[int, float], float]
"""`ceiling(callers, seconds)`: first executions / s of a raw ceiling, run in a worker thread."""


def redis_benchmark_ceiling(url: str) -> Ceiling | None:
    """The same two scripts sent by redis-benchmark (C, no Python): what the server allows."""
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    port = url.rsplit(":", 1)[1].split("/")[0]
    client = redis.Redis(port=int(port))
    claim_sha = client.script_load(RAW_CLAIM_LUA)
    complete_sha = client.script_load(RAW_COMPLETE_LUA)
    client.close()

    def ceiling(n: int, _seconds: float) -> float:
        took = 0.0
        for command in (
            ["evalsha", claim_sha, "1", f"rb{n}:__rand_int__", FP, "owner", "60000"],
            ["evalsha", complete_sha, "1", f"rb{n}:__rand_int__", "outcome", "3600000"],
        ):
            requests = max(1000, 4 * n)  # redis-benchmark counts requests, not seconds
            out = subprocess.run(
                [
                    *(binary, "-p", port, "-c", str(n), "-n", str(requests)),
                    *("-r", "100000000", "--csv", *command),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
            found = re.findall(r'^"[^"]*","([0-9.]+)"', out, re.MULTILINE)
            if not found:
                raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
            took += 1 / float(found[-1])
        return 1 / took  # one claim plus one completion

    return ceiling


def sqlite_sync_ceiling(path: Path) -> Ceiling:
    """Raw sqlite3 in one plain loop, no thread hop: the most one connection does here."""
    raw = RawSQLite(path)
    done = 0

    def ceiling(_n: int, seconds: float) -> float:
        nonlocal done
        count = 0
        stop = time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < stop:
            key = f"sync-{done}"
            raw.claim_sync(key)
            raw.complete_sync(key)
            done += 1
            count += 1
        return count / (time.perf_counter() - started)

    return ceiling


@dataclass
class Panel:
    title: str
    store: Curve
    raw: Curve
    ceilings: list[Curve]


async def concurrency_curves(
    levels: list[int], seconds: float, redis_url: str, tmp: Path
) -> list[Panel]:
    panels = []

    # redis-py's asyncio pool refuses the 101st concurrent command (MaxConnectionsError) by
    # default: both clients get one connection per caller here, as the raw ceiling needs.
    most = max(levels)
    rstore = RedisStore.from_url(redis_url, prefix=f"conc-{RUN}:", max_connections=most)
    raw_redis = RawRedis(redis_url, max_connections=most)
    await raw_redis.load()
    redis_panel = Panel(
        "Redis (private redis-server)",
        Curve("RedisStore"),
        Curve("raw redis-py EVALSHA, same client"),
        [],
    )
    bench = redis_benchmark_ceiling(redis_url)
    if bench is not None:
        redis_panel.ceilings.append(Curve("redis-benchmark (C client), same scripts"))
    try:
        await pair(
            redis_panel.store,
            redis_panel.raw,
            store_unit(rstore),
            raw_unit(raw_redis),
            levels,
            seconds,
            [] if bench is None else [(redis_panel.ceilings[0], bench)],
        )
    finally:
        await raw_redis.client.aclose()
        await rstore.aclose()
    panels.append(redis_panel)

    table = f"{TABLE_PREFIX}conc"
    pstore = PostgresStore.from_url(POSTGRES_URL, table=table, min_size=PG_POOL, max_size=PG_POOL)
    await pstore.create_schema()
    raw_pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        POSTGRES_URL, min_size=PG_POOL, max_size=PG_POOL, kwargs={"autocommit": True}, open=False
    )
    await raw_pool.open(wait=True)
    await pstore.pool.open(wait=True)
    pg_panel = Panel(
        f"PostgreSQL (pools of {PG_POOL} connections)",
        Curve("PostgresStore"),
        Curve("raw psycopg INSERT … ON CONFLICT / UPDATE"),
        [],
    )
    try:
        await pair(
            pg_panel.store,
            pg_panel.raw,
            store_unit(pstore),
            raw_unit(RawPostgres(table, raw_pool)),
            levels,
            seconds,
        )
    finally:
        await raw_pool.close()
        await pstore.drop_schema()
        await pstore.aclose()
    panels.append(pg_panel)

    lite = SQLiteStore(tmp / "conc-store.db", max_bytes=64 << 30, max_bytes_per_scope=None)
    raw_lite = RawSQLite(tmp / "conc-raw.db")
    plain = Curve("raw sqlite3, one plain loop (no thread hop)")
    lite_panel = Panel(
        "SQLite (WAL, synchronous=FULL)",
        Curve("SQLiteStore"),
        Curve("raw sqlite3, same thread model"),
        [plain],
    )
    try:
        await pair(
            lite_panel.store,
            lite_panel.raw,
            store_unit(lite),
            raw_unit(raw_lite),
            levels,
            seconds,
            [(plain, sqlite_sync_ceiling(tmp / "conc-sync.db"))],
        )
    finally:
        raw_lite.close()
        await lite.aclose()
    panels.append(lite_panel)
    return panels


# -- plots ---------------------------------------------------------------------------------------


def plot_records(rows: list[SizeRow], path: Path) -> None:
    import matplotlib  # optional, for the plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(OPS), figsize=(17, 4.2), sharey=True)
    stores = list(dict.fromkeys(r.store for r in rows))
    for ax, op in zip(axes, OPS, strict=True):
        for name in stores:
            mine = [r for r in rows if r.store == name]
            xs = [r.size for r in mine]
            ax.plot(xs, [r.ops[op] for r in mine], "o-", color=STORE_COLORS[name], label=name)
            if op == "claim" and mine[0].raw_claim is not None:
                raw = [r.raw_claim for r in mine]
                ax.plot(xs, raw, "x--", color=STORE_COLORS[name], label=f"raw claim ({name})")
        ax.set_xscale("log")
        ax.set_yscale("log")
        sizes = sorted({r.size for r in rows})
        ax.set_xticks(sizes, [_count(n) for n in sizes])
        ax.minorticks_off()
        ax.set_xlim(sizes[0] / 2, sizes[-1] * 2)
        ax.set_title(op)
        ax.set_xlabel("live records")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("median µs per operation")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.suptitle("Per-operation cost against live records (dashed: the database's bare claim)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_concurrency(panels: list[Panel], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(16, 5.6))
    for ax, panel in zip(axes, panels, strict=True):
        for curve, style in [(panel.store, "o-"), (panel.raw, "x--")] + [
            (c, ":") for c in panel.ceilings
        ]:
            xs = sorted(curve.points)
            ax.plot(xs, [curve.points[x] for x in xs], style, label=curve.label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        xs = sorted(panel.store.points)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_title(panel.title)
        ax.set_xlabel("concurrent callers")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    axes[0].set_ylabel("first executions / s (claim + complete)")
    fig.suptitle("Throughput against concurrency, beside the raw ceilings of the same database")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# -- report --------------------------------------------------------------------------------------


def report(rows: list[SizeRow], panels: list[Panel], sizes: list[int], samples: int) -> None:
    small = sizes[0]
    print(f"1. Median µs per operation against live records ({samples} samples per size)")
    print("| store | live records | " + " | ".join(OPS) + " | raw claim | claim ÷ raw | fill s |")
    print("|---|---:|" + "---:|" * (len(OPS) + 3))
    for r in rows:
        raw = "" if r.raw_claim is None else f"{r.raw_claim:.1f}"
        ratio = "" if r.raw_claim is None else f"{r.ops['claim'] / r.raw_claim:.2f}"
        cells = " | ".join(f"{r.ops[op]:.1f}" for op in OPS)
        print(f"| {r.store} | {_count(r.size)} | {cells} | {raw} | {ratio} | {r.fill_s:.1f} |")
    print()
    print(f"   Ratio to the same store at {small:,} records (1.00 = no growth)")
    print("| store | live records | " + " | ".join(OPS) + " | raw claim |")
    print("|---|---:|" + "---:|" * (len(OPS) + 1))
    for r in rows:
        base = next(b for b in rows if b.store == r.store and b.size == small)
        if r.size == small:
            continue
        cells = " | ".join(f"{r.ops[op] / base.ops[op]:.2f}" for op in OPS)
        raw = (
            ""
            if r.raw_claim is None or base.raw_claim is None
            else f"{r.raw_claim / base.raw_claim:.2f}"
        )
        print(f"| {r.store} | {_count(r.size)} | {cells} | {raw} |")
    print()
    print("2. First executions per second (claim + complete of a new key) against callers")
    for panel in panels:
        print(f"   {panel.title}")
        heads = [panel.store.label, panel.raw.label, "store ÷ raw"] + [
            f"{c.label}" for c in panel.ceilings
        ]
        heads += [f"store ÷ {c.label.split(',')[0]}" for c in panel.ceilings]
        print("| callers | " + " | ".join(heads) + " |")
        print("|---:|" + "---:|" * len(heads))
        for n in sorted(panel.store.points):
            s, bare = panel.store.points[n], panel.raw.points[n]
            row = [f"{s:.0f}", f"{bare:.0f}", f"{s / bare:.2f}"]
            row += [f"{c.points[n]:.0f}" for c in panel.ceilings]
            row += [f"{s / c.points[n]:.2f}" for c in panel.ceilings]
            print(f"| {n} | " + " | ".join(row) + " |")
        print()


def cleanup() -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (TABLE_PREFIX + "%",)
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def _count(n: int) -> str:
    for unit, name in ((1_000_000, "M"), (1_000, "k")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return str(n)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 k and 100 k records, short runs")
    parser.add_argument("--sizes", type=_ints, default=None, help="live record counts, a,b,c")
    parser.add_argument("--levels", type=_ints, default=None, help="concurrent callers, a,b,c")
    parser.add_argument("--seconds", type=float, default=None, help="per throughput point")
    parser.add_argument("--samples", type=int, default=None, help="per operation and size")
    parser.add_argument("--plots", type=Path, default=Path(__file__).parent.parent / "docs/img")
    args = parser.parse_args()
    sizes = args.sizes or ([1000, 100_000] if args.quick else [1000, 100_000, 1_000_000])
    levels = args.levels or [1, 2, 4, 8, 16, 32, 64, 128, 256]
    seconds = args.seconds or (0.4 if args.quick else 1.0)
    samples = args.samples or (150 if args.quick else 300)

    started = time.perf_counter()
    versions = f"redis-py {redis.__version__}, psycopg {psycopg.__version__}"
    print(
        f"Python {sys.version.split()[0]}, {versions}, sqlite {sqlite3.sqlite_version}; run {RUN}"
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            with private_redis("--maxclients", "2000") as redis_port:
                redis_url = f"redis://127.0.0.1:{redis_port}/0"
                rows = asyncio.run(records_curves(sizes, samples, redis_url, tmp))
                gc.collect()
                panels = asyncio.run(concurrency_curves(levels, seconds, redis_url, tmp))
        finally:
            cleanup()
    print()
    report(rows, panels, sizes, samples)
    args.plots.mkdir(parents=True, exist_ok=True)
    plot_records(rows, args.plots / "curves-records.png")
    plot_concurrency(panels, args.plots / "curves-concurrency.png")
    print(f"plots: {args.plots}/curves-records.png, {args.plots}/curves-concurrency.png")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
