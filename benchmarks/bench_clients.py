"""Raw EVALSHA throughput of async Redis clients at concurrency 1, 8 and 64, in one run.

(Not a test.)

    pip install -e ".[redis,bench]"      # bench: hiredis, coredis, valkey-glide
    python benchmarks/bench_clients.py [--seconds 0.5] [--rounds 5]

Would a faster async client than redis-py pay? Every client runs the
same workload: idemtools' own claim script (`_CLAIM` from `idemtools/stores/redis.py`, loaded
once), then `c` asyncio workers each looping one EVALSHA at a time on fresh keys (a first
claim: EXISTS-like read, HSET, PEXPIRE) for `--seconds`. Rows:

* redis-py (py parser) and redis-py (hiredis): `redis.asyncio`, on the client
  `RedisStore.from_url` builds (blocking pool of 100 connections);
* redis-py + idemtools coalescing: the same client through the store's own EVALSHA path
  (`stores/_coalesce.py`: concurrent calls share one write), what `RedisStore` does by
  default: the bar another client has to clear, not a raw client;
* coredis: `coredis.Redis` with its defaults (RESP3, a pool of up to 64 connections);
* valkey-glide: `GlideClient` with its defaults (one multiplexed connection, Rust core),
  `invoke_script` (EVALSHA, loading the script on NOSCRIPT).

A client that is not installed, or does not start here, gets a row saying why; the others
still run. Needs `redis-server` on PATH; starts a private one on a free port (the shared one is
not loaded), flushes it between cells (outside the timing) and stops it at the end. All rounds
are interleaved (every client at every concurrency, then the next round) so the machine's
drift hits all alike; cells show the median and the range, ratios are of medians in this run.
Calls are counted per second of wall time and per CPU-second of this process (all its threads,
so glide's Rust threads count too): on a shared machine the second is the steadier figure,
though it leaves out what the Redis server spends. About 40 s with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis
from _redis_server import private_redis

from idemtools.stores import redis as redis_store

CONCURRENCY = (1, 8, 64)
FP = "f" * 64
OWNER = "0" * 32
LEASE_MS = 60_000
CLAIM = redis_store._Script(redis_store._CLAIM)  # the store's own claim script and its SHA1
BASELINE = "redis-py (py parser)"

Call = Callable[[str], Awaitable[Any]]  # one EVALSHA of the claim script on a key


# -- private redis-server -------------------------------------------------------------------------


# -- the clients: each an async context manager yielding `call(key)` ----------------------------


@contextlib.asynccontextmanager
async def redis_py(port: int, hiredis: bool, coalesce: bool = False) -> AsyncIterator[Call]:
    from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser
    from redis.utils import HIREDIS_AVAILABLE

    if hiredis and not HIREDIS_AVAILABLE:
        raise ModuleNotFoundError("hiredis not installed")
    parser = _AsyncHiredisParser if hiredis else _AsyncRESP2Parser
    # The client idemtools itself builds, so this row is what RedisStore gets.
    store = redis_store.RedisStore.from_url(
        f"redis://127.0.0.1:{port}", coalesce=coalesce, parser_class=parser
    )
    client = store.client
    # With coalescing, the store's own EVALSHA path: concurrent calls share one write.
    evalsha = store._evalsha if coalesce else client.evalsha
    try:
        await client.script_load(CLAIM.text)

        async def call(key: str) -> Any:
            return await evalsha(CLAIM.sha, 1, key, FP, OWNER, LEASE_MS)

        yield call
    finally:
        await store.aclose()


@contextlib.asynccontextmanager
async def coredis_client(port: int) -> AsyncIterator[Call]:
    import coredis  # optional comparison client

    async with coredis.Redis(host="127.0.0.1", port=port) as client:
        await client.script_load(CLAIM.text)

        async def call(key: str) -> Any:
            return await client.evalsha(CLAIM.sha, keys=[key], args=[FP, OWNER, LEASE_MS])

        yield call


@contextlib.asynccontextmanager
async def glide_client(port: int) -> AsyncIterator[Call]:
    from glide import (  # optional comparison client
        GlideClient,
        GlideClientConfiguration,
        NodeAddress,
        Script,
    )

    client = await GlideClient.create(
        GlideClientConfiguration([NodeAddress("127.0.0.1", port)], request_timeout=5000)
    )
    script = Script(CLAIM.text)
    try:
        await client.invoke_script(script, keys=["warm-up"], args=[FP, OWNER, str(LEASE_MS)])

        async def call(key: str) -> Any:
            return await client.invoke_script(script, keys=[key], args=[FP, OWNER, "60000"])

        yield call
    finally:
        await client.close()


CLIENTS: dict[str, Callable[[int], contextlib.AbstractAsyncContextManager[Call]]] = {
    BASELINE: lambda port: redis_py(port, hiredis=False),
    "redis-py (hiredis)": lambda port: redis_py(port, hiredis=True),
    "redis-py + idemtools coalescing (py)": lambda port: redis_py(port, False, coalesce=True),
    "coredis": coredis_client,
    "valkey-glide": glide_client,
}


def version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as v

    try:
        return v(name)
    except PackageNotFoundError:
        return "not installed"


# -- measurement ----------------------------------------------------------------------------------


@dataclass
class Samples:
    wall: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def median(self, name: str, c: int, *, cpu: bool) -> float | None:
        got = (self.cpu if cpu else self.wall).get((name, c))
        return statistics.median(got) if got else None

    def cell(self, name: str, c: int, *, cpu: bool) -> str:
        got = (self.cpu if cpu else self.wall).get((name, c))
        if not got:
            return "–"
        return f"{statistics.median(got):,.0f} ({min(got) / 1000:.1f}–{max(got) / 1000:.1f} k)"


async def run_workers(c: int, seconds: float, call: Call, prefix: str) -> tuple[int, float, float]:
    """`c` workers, each looping one call at a time on fresh keys; (calls, wall s, CPU s)."""
    done = [0] * c
    wrong: list[Any] = []
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            reply = await call(f"{prefix}:{w}:{i}")
            if reply != 1:  # a fresh key is always claimed: anything else is a broken run
                wrong.append(reply)
            i += 1
        done[w] = i

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker(w) for w in range(c)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if wrong:
        raise RuntimeError(f"{len(wrong)} claims of fresh keys did not return 1: {wrong[:3]}")
    return sum(done), wall, cpu


async def measure(port: int, args: argparse.Namespace) -> tuple[Samples, dict[str, str]]:
    samples, missing = Samples(), {}
    flush = redis.Redis(port=port)
    async with contextlib.AsyncExitStack() as stack:
        calls: dict[str, Call] = {}
        for name, make in CLIENTS.items():
            try:
                calls[name] = await stack.enter_async_context(make(port))
            except ModuleNotFoundError as e:
                missing[name] = f"not installed ({e.name or e})"
            except Exception as e:  # a client that does not run here: say why, carry on
                missing[name] = f"does not run here: {type(e).__name__}: {e}"
        for name, call in calls.items():  # untimed: open every pool's connections first
            await run_workers(max(CONCURRENCY), 0.1, call, f"warm-up:{name}")
        flush.flushdb()
        for r in range(args.rounds):
            for c in CONCURRENCY:
                for name, call in calls.items():
                    n, wall, cpu = await run_workers(c, args.seconds, call, f"{r}:{c}:{name}")
                    samples.wall.setdefault((name, c), []).append(n / wall)
                    if cpu > 0:
                        samples.cpu.setdefault((name, c), []).append(n / cpu)
                    flush.flushdb()  # outside the timing: every cell starts on an empty Redis
            print(f"  round {r + 1}/{args.rounds} done", file=sys.stderr)
    flush.close()
    return samples, missing


def report(samples: Samples, missing: dict[str, str], args: argparse.Namespace) -> None:
    import platform

    server = redis.Redis(port=args.port).info("server")["redis_version"]
    print(
        f"\nEVALSHA of idemtools' claim script, fresh keys; {args.rounds} rounds x "
        f"{args.seconds} s per cell; Python {platform.python_version()}, Redis {server}; "
        + ", ".join(f"{p} {version(p)}" for p in ("redis", "hiredis", "coredis", "valkey-glide"))
    )
    with contextlib.suppress(OSError):
        print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for cpu in (False, True):
        unit = "calls per CPU-second of this process" if cpu else "calls per second (wall)"
        print(f"\n{unit}: median (min–max); ratio of medians ÷ {BASELINE}\n")
        head = "| client | " + " | ".join(f"c={c} | ÷ py" for c in CONCURRENCY) + " |"
        print(head)
        print("|---|" + "---:|---:|" * len(CONCURRENCY))
        for name in CLIENTS:
            if name in missing:
                print(f"| {name} | {missing[name]} |")
                continue
            cells = []
            for c in CONCURRENCY:
                mine, base = (samples.median(n, c, cpu=cpu) for n in (name, BASELINE))
                ratio = f"{mine / base:.2f}" if mine and base else "–"
                cells += [samples.cell(name, c, cpu=cpu), ratio]
            print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per cell (default 0.5)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not on PATH")
    started = time.perf_counter()
    with private_redis() as port:
        args.port = port
        samples, missing = asyncio.run(measure(port, args))
        report(samples, missing, args)
    print(f"\ntook {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
