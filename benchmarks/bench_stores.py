"""Store benchmarks (not a test): round trips on Redis, Powertools comparison, scaling, memory.

    python benchmarks/bench_stores.py [--records 1000000] [--rounds 3000]

Needs the local Redis and PostgreSQL (IDEMTOOLS_REDIS_URL / IDEMTOOLS_POSTGRES_URL, defaults
127.0.0.1). Optional: `pip install 'aws-lambda-powertools[redis]'` for the Powertools column
(never a dependency of idemtools). Everything it writes carries a per-run prefix / table name and
is deleted at the end. Prints four tables:

1. Redis latency, interleaved in one run: one raw redis-py round trip (PING), RedisStore first
   execution (claim + complete) and replay (claim); medians, and ratios to the raw round trip.
2. Throughput of a whole keyed call, idemtools Engine + RedisStore vs Powertools'
   `idempotent_function` + `RedisCachePersistenceLayer`, same Redis, same payload, same work.
3. Per-operation cost of every store with 1 k and with N (default 1 M) live records.
4. MemoryStore bytes per record beyond the stored outcome (tracemalloc).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import io
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import redis
import redis.asyncio
from psycopg import sql

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores.memory import MemoryStore
from idemtools.stores.postgres import PostgresStore
from idemtools.stores.redis import RedisStore

try:
    from idemtools.stores.sqlite import SQLiteStore
except ImportError:  # pragma: no cover
    SQLiteStore = None  # type: ignore[assignment,misc]

REDIS_URL = os.environ.get("IDEMTOOLS_REDIS_URL") or "redis://127.0.0.1:6379/0"
POSTGRES_URL = (
    os.environ.get("IDEMTOOLS_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
)
RUN = uuid.uuid4().hex[:8]
PREFIX = f"idemtools-bench-{RUN}:"
FP = "f" * 64
OUTCOME = Outcome(
    result={"content": [{"type": "text", "text": "order A-1001 paid: 42.00 EUR"}], "isError": False}
).to_bytes()
SCOPE = "b" * 64


def med_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000.0


async def timed(op: Callable[[], Awaitable[Any]]) -> int:
    t = time.perf_counter_ns()
    await op()
    return time.perf_counter_ns() - t


# -- 1. Redis round trips -------------------------------------------------------------------------


async def redis_round_trips(rounds: int) -> dict[str, float]:
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    store = RedisStore(client, prefix=PREFIX + "rt:")
    for i in range(200):  # warm-up: connection, script cache, code paths
        await client.ping()
        await store.claim(SCOPE, f"w{i}", FP, "o", 60)
        await store.complete(SCOPE, f"w{i}", "o", OUTCOME, 600)
        await store.claim(SCOPE, f"w{i}", FP, "o2", 60)
    raw, first, replay = [], [], []
    for i in range(rounds):  # interleaved, so drift hits all three alike
        raw.append(await timed(client.ping))
        key = f"k{i}"

        async def first_execution(key: str = key) -> None:
            assert (await store.claim(SCOPE, key, FP, "owner", 60)).claimed
            assert await store.complete(SCOPE, key, "owner", OUTCOME, 600)

        first.append(await timed(first_execution))

        async def replayed(key: str = key) -> None:
            claim = await store.claim(SCOPE, key, FP, "other", 60)
            assert claim.existing is not None and claim.existing.outcome == OUTCOME

        replay.append(await timed(replayed))
    await client.aclose()
    return {"raw": med_us(raw), "first": med_us(first), "replay": med_us(replay)}


# -- 2. Powertools comparison ---------------------------------------------------------------------


def powertools_throughput(calls: int) -> dict[str, float] | str:
    try:
        from aws_lambda_powertools.utilities.idempotency import (
            IdempotencyConfig,
            idempotent_function,
        )
        from aws_lambda_powertools.utilities.idempotency.persistence.redis import (
            RedisCachePersistenceLayer,
        )
    except ImportError as exc:
        return f"not installed ({exc}); pip install 'aws-lambda-powertools[redis]'"
    warnings.filterwarnings("ignore", module="aws_lambda_powertools")  # deprecation, no Lambda
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message="Couldn't determine the remaining time")
    client = redis.Redis.from_url(REDIS_URL)
    layer = RedisCachePersistenceLayer(client=client)
    config = IdempotencyConfig(expires_after_seconds=600)

    @idempotent_function(  # type: ignore[untyped-decorator]  # an optional, unstubbed extra
        data_keyword_argument="order",
        persistence_store=layer,
        config=config,
        key_prefix=PREFIX + "pt",
    )
    def pay(order: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "order A-1001 paid: 42.00 EUR"}]}

    for i in range(100):
        pay(order={"order_id": f"warm-{i}", "amount": 4200})
        pay(order={"order_id": f"warm-{i}", "amount": 4200})
    t = time.perf_counter()
    for i in range(calls):
        pay(order={"order_id": f"o-{i}", "amount": 4200})
    first = calls / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(calls):
        pay(order={"order_id": f"o-{i}", "amount": 4200})
    replay = calls / (time.perf_counter() - t)
    client.close()
    return {"first": first, "replay": replay}


async def idemtools_throughput(calls: int) -> dict[str, float]:
    store = RedisStore.from_url(REDIS_URL, prefix=PREFIX + "it:")
    engine = Engine(store)
    policy = Policy.of(lease=60, retention=600, scope=shared)
    result = {"content": [{"type": "text", "text": "order A-1001 paid: 42.00 EUR"}]}

    async def run() -> Outcome:
        return Outcome(result={**result, "isError": False})

    def call(i: int, tag: str) -> ToolCall:
        return ToolCall(
            name="pay",
            arguments={"order": {"order_id": f"{tag}-{i}", "amount": 4200}},
            key=f"{tag}-{i}",
            policy=policy,
        )

    for i in range(100):
        await engine.handle(call(i, "warm"), run)
        await engine.handle(call(i, "warm"), run)
    t = time.perf_counter()
    for i in range(calls):
        await engine.handle(call(i, "o"), run)
    first = calls / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(calls):
        out = await engine.handle(call(i, "o"), run)
    replay = calls / (time.perf_counter() - t)
    assert out.replayed and engine.stats.executions == calls + 100
    await store.aclose()
    return {"first": first, "replay": replay}


# -- 3. scaling: 1 k vs N live records ------------------------------------------------------------


async def per_op_cost(store: Any, tag: str, samples: int = 2000) -> tuple[float, float]:
    """Median µs of (claim new key + complete) and of a replay claim, on `store` as it is."""
    firsts, replays = [], []
    for i in range(samples):
        key = f"{tag}-{i}"

        async def first(key: str = key) -> None:
            assert (await store.claim(SCOPE, key, FP, "owner", 60)).claimed
            assert await store.complete(SCOPE, key, "owner", OUTCOME, 3600)

        firsts.append(await timed(first))

        async def again(key: str = key) -> None:
            assert not (await store.claim(SCOPE, key, FP, "o2", 60)).claimed

        replays.append(await timed(again))
    return med_us(firsts), med_us(replays)


async def fill_memory(store: MemoryStore, start: int, n: int) -> None:
    for i in range(start, start + n):
        key = f"fill-{i}"
        await store.claim(SCOPE, key, FP, "owner", 3600)
        await store.complete(SCOPE, key, "owner", OUTCOME, 3600)


def fill_sqlite(path: Path, start: int, n: int) -> None:
    import sqlite3

    conn = sqlite3.connect(path)
    expires = time.time() + 3600
    with conn:
        conn.executemany(
            "INSERT INTO idemtools_records "
            "(scope, key, status, fingerprint, owner, expires, outcome) "
            "VALUES (?, ?, 'completed', ?, 'owner', ?, ?)",
            (
                (SCOPE.encode(), f"fill-{i}".encode(), FP, expires, OUTCOME)
                for i in range(start, start + n)
            ),
        )
    conn.close()


async def fill_redis(store: RedisStore, start: int, n: int) -> None:
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    batch = 10_000
    for lo in range(start, start + n, batch):
        pipe = client.pipeline(transaction=False)
        for i in range(lo, min(lo + batch, start + n)):
            name = store.key_name(SCOPE, f"fill-{i}")
            pipe.hset(name, mapping={"s": "c", "f": FP, "o": "owner", "v": OUTCOME})
            pipe.pexpire(name, 3_600_000)
        await pipe.execute()
    await client.aclose()


def fill_postgres(table: str, start: int, n: int) -> None:
    """COPY … FROM STDIN in binary: a million rows in a few seconds."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn, conn.cursor() as cur:
        copy_sql = sql.SQL(
            "COPY {} (scope, key, status, fingerprint, owner, outcome, expires_at) FROM STDIN"
        ).format(sql.Identifier(table))
        expires = conn.execute("SELECT now() + interval '1 hour'").fetchone()[0]  # type: ignore[index]
        with cur.copy(copy_sql) as copy:
            copy.set_types(["bytea", "bytea", "text", "text", "text", "bytea", "timestamptz"])
            for i in range(start, start + n):
                copy.write_row(
                    (SCOPE.encode(), f"fill-{i}".encode(), "c", FP, "owner", OUTCOME, expires)
                )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


async def scaling(n_big: int) -> list[tuple[str, float, float, float, float, str]]:
    rows: list[tuple[str, float, float, float, float, str]] = []
    small = 1000

    async def measure(name: str, store: Any, fill: Callable[[int, int], Awaitable[None]]) -> None:
        await fill(0, small)
        f1, r1 = await per_op_cost(store, "at1k")
        t = time.perf_counter()
        await fill(small, n_big - small)
        took = time.perf_counter() - t
        f2, r2 = await per_op_cost(store, "atbig")
        rows.append((name, f1, r1, f2, r2, f"filled in {took:.1f} s"))
        print(f"  {name}: done", file=sys.stderr)

    async def fill_mem(a: int, b: int) -> None:
        await fill_memory(memory, a, b)

    memory = MemoryStore(
        max_records=n_big + 10_000, max_records_per_scope=None, max_bytes_per_scope=None
    )
    await measure("MemoryStore", memory, fill_mem)
    memory = MemoryStore()  # drop the big one before the next store
    gc.collect()

    if SQLiteStore is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "bench.db"
            lite = SQLiteStore(path, max_bytes_per_scope=None)  # one scope fills it
            await lite.get(SCOPE, "create-schema")  # the store creates its schema on first use

            async def fill_lite(a: int, b: int) -> None:
                await asyncio.to_thread(fill_sqlite, path, a, b)

            await measure("SQLiteStore", lite, fill_lite)
            await lite.aclose()
    else:
        rows.append(("SQLiteStore", 0, 0, 0, 0, "not available in this checkout"))

    rstore = RedisStore.from_url(REDIS_URL, prefix=PREFIX + "scale:")
    await measure("RedisStore", rstore, lambda a, b: fill_redis(rstore, a, b))
    await rstore.aclose()

    table = f"idemtools_bench_{RUN}"
    pstore = PostgresStore.from_url(POSTGRES_URL, table=table, purge_every=0)
    await pstore.create_schema()

    async def fill_pg(a: int, b: int) -> None:
        await asyncio.to_thread(fill_postgres, table, a, b)

    await measure("PostgresStore", pstore, fill_pg)
    await pstore.drop_schema()
    await pstore.aclose()
    return rows


# -- 4. MemoryStore bytes per record --------------------------------------------------------------


async def memory_bytes_per_record(n: int = 100_000) -> float:
    """Traced bytes per completed record beyond its outcome: the store keeps an exact-size copy
    of each outcome (see `MemoryStore.complete`), whose own size is taken off."""
    outcome = bytes(OUTCOME)
    store = MemoryStore(max_records=n + 1, max_records_per_scope=None, max_bytes_per_scope=None)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(n):
        key = uuid.uuid4().hex  # a 32-character key, as clients typically send
        fp = os.urandom(32).hex()  # fingerprint and owner strings are kept by the record
        owner = uuid.uuid4().hex
        await store.claim(SCOPE, key, fp, owner, 3600)
        await store.complete(SCOPE, key, owner, outcome, 3600)
    del key, fp, owner
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    assert len(store) == n
    return used / n - sys.getsizeof(outcome)


# -- cleanup and main -----------------------------------------------------------------------------


def cleanup() -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for pattern in (f"{PREFIX}*",):
        names = list(client.scan_iter(match=pattern, count=10_000))
        for lo in range(0, len(names), 10_000):
            client.delete(*names[lo : lo + 10_000])
    client.close()
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(f"idemtools_bench_{RUN}"))
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    out = io.StringIO()
    try:
        rt = asyncio.run(redis_round_trips(args.rounds))
        it = asyncio.run(idemtools_throughput(args.calls))
        pt = powertools_throughput(args.calls)
        scale = asyncio.run(scaling(args.records))
        mem = asyncio.run(memory_bytes_per_record())
    finally:
        cleanup()

    p: Callable[..., None] = lambda *a: print(*a, file=out)  # noqa: E731
    versions = f"redis-py {redis.__version__}, psycopg {psycopg.__version__}"
    p(f"Python {sys.version.split()[0]}, {versions}")
    p(f"Redis {REDIS_URL}, PostgreSQL {POSTGRES_URL.split('@')[-1]}; run {RUN}")
    p()
    p(f"1. Redis latency, medians of {args.rounds} interleaved rounds")
    p("| operation | median µs | × raw round trip | goal |")
    p("|---|---:|---:|---:|")
    p(f"| raw redis-py round trip (PING) | {rt['raw']:.1f} | 1.00 | |")
    p(
        f"| RedisStore first execution (claim + complete) | {rt['first']:.1f} | "
        f"{rt['first'] / rt['raw']:.2f} | ≤ 2.5 |"
    )
    p(
        f"| RedisStore replay (claim) | {rt['replay']:.1f} | "
        f"{rt['replay'] / rt['raw']:.2f} | ≤ 1.3 |"
    )
    p()
    p(f"2. Whole keyed calls per second on the same Redis, {args.calls} sequential calls")
    p("| library | first executions/s | replays/s |")
    p("|---|---:|---:|")
    p(f"| idemtools Engine + RedisStore (async) | {it['first']:.0f} | {it['replay']:.0f} |")
    p(
        f"| idemtools RedisStore alone, medians of table 1 | {1e6 / rt['first']:.0f} | "
        f"{1e6 / rt['replay']:.0f} |"
    )
    if isinstance(pt, dict):
        p(
            f"| Powertools idempotent_function + RedisCachePersistenceLayer (sync) | "
            f"{pt['first']:.0f} | {pt['replay']:.0f} |"
        )
        p(
            f"| idemtools / Powertools | {it['first'] / pt['first']:.2f} × | "
            f"{it['replay'] / pt['replay']:.2f} × |"
        )
    else:
        p(f"| Powertools | {pt} | |")
    p()
    p(f"3. Per-operation cost (median µs) with 1 k and {args.records:,} live records")
    p("| store | first @1k | replay @1k | first @N | replay @N | ratio first | ratio replay | |")
    p("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, f1, r1, f2, r2, note in scale:
        if not f1:
            p(f"| {name} | | | | | | | {note} |")
            continue
        p(
            f"| {name} | {f1:.1f} | {r1:.1f} | {f2:.1f} | {r2:.1f} | {f2 / f1:.2f} | "
            f"{r2 / r1:.2f} | {note} |"
        )
    p()
    p(
        "4. MemoryStore bytes per record beyond the stored outcome (tracemalloc, 100k records, "
        f"32-char keys): {mem:.0f} B (goal ≤ 600)"
    )
    print(out.getvalue())


if __name__ == "__main__":
    main()
