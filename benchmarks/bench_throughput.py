"""Throughput on one Redis at concurrency 1, 8 and 64, side by side in one run (not a test).

    pip install -e ".[bench]"      # hiredis, aws-lambda-powertools[redis], boto3
    python benchmarks/bench_throughput.py [--seconds 0.2] [--rounds 5]

Needs `redis-server` and `redis-benchmark` on PATH; starts a private redis-server on a free port
(so the shared one is not loaded) and stops it at the end. Optional: hiredis (then both parsers
are measured) and `aws-lambda-powertools[redis]` (the Powertools rows); the `bench` extra
installs both. Runs about two minutes with the defaults.

Every configuration runs `--rounds` times for `--seconds` each, interleaved (all of round 1,
then all of round 2...) so that the machine's drift hits all alike; the table shows the median
and the range, and ratios of medians measured in this run. Each table is printed twice: calls
per second of wall time, and calls per CPU-second of this process (all its threads). On a
shared machine the second is the steadier one: it does not depend on how much of a core the
scheduler lends the process, though it leaves out what the Redis server spends. Rows:

* raw loop: redis-py asyncio issuing the store's own scripts by EVALSHA, one call at a time
  per worker (claim + complete for a first execution, claim for a replay), on a client with
  the settings `RedisStore.from_url` gives its own.
* idemtools: `Engine.handle` + `RedisStore.from_url`, a whole keyed call (fingerprint, claim,
  the tool, outcome JSON, complete), with coalescing on (the default) and off.
* redis-benchmark: the claim script by EVALSHA from C clients (`-c` = concurrency, no
  pipelining): what Redis serves; half of it is the first-execution ceiling (two scripts).
* Powertools: `idempotent_function` + `RedisCachePersistenceLayer` on the sync client,
  driven by a thread pool of the same size.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
from _redis_server import private_redis
from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser, _HiredisParser, _RESP2Parser
from redis.utils import HIREDIS_AVAILABLE

from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores import redis as redis_store
from idemtools.stores.redis import RedisStore

CONCURRENCY = (1, 8, 64)
FP = "f" * 64
RESULT = {"content": [{"type": "text", "text": "order A-1001 paid: 42.00 EUR"}]}
OUTCOME = Outcome(result={**RESULT, "isError": False}).to_bytes()
REPLAY_KEYS = 512  # completed keys the replays cycle through
_RUNS = itertools.count()  # a fresh key space for every measurement of first executions


@dataclass
class Samples:
    """Calls per second of wall time, and per CPU-second of this process, by (row, c)."""

    values: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    cpu: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def add(self, name: str, c: int, rate: tuple[float, float | None]) -> None:
        self.values.setdefault((name, c), []).append(rate[0])
        if rate[1] is not None:
            self.cpu.setdefault((name, c), []).append(rate[1])

    def median(self, name: str, c: int, *, cpu: bool = False) -> float | None:
        got = (self.cpu if cpu else self.values).get((name, c))
        return statistics.median(got) if got else None

    def cell(self, name: str, c: int, *, cpu: bool = False) -> str:
        got = (self.cpu if cpu else self.values).get((name, c))
        if not got:
            return "–"
        return f"{statistics.median(got):,.0f} ({min(got) / 1000:.1f}–{max(got) / 1000:.1f} k)"


class Clock:
    """Wall and CPU time of this process (all its threads) over one measurement."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def rates(self, calls: int) -> tuple[float, float | None]:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return calls / wall, (calls / cpu if cpu > 0 else None)


# -- the async rows -------------------------------------------------------------------------------


async def run_workers(
    c: int, seconds: float, one: Callable[[int, int], Awaitable[None]]
) -> tuple[float, float | None]:
    """`c` workers calling `one(worker, i)` until the time is up; calls per second (wall, CPU)."""
    done = [0] * c
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            await one(w, i)
            i += 1
        done[w] = i

    clock = Clock()
    await asyncio.gather(*(worker(w) for w in range(c)))
    return clock.rates(sum(done))


class AsyncRows:
    """Raw loop and idemtools (coalescing on and off) on one parser."""

    def __init__(self, url: str, parser: type, tag: str) -> None:
        self.url, self.parser, self.tag = url, parser, tag

    async def setup(self) -> None:
        settings: dict[str, Any] = {"parser_class": self.parser}
        self.stores = {
            "on": RedisStore.from_url(self.url, prefix=f"it-{self.tag}:", **settings),
            "off": RedisStore.from_url(
                self.url, prefix=f"itoff-{self.tag}:", coalesce=False, **settings
            ),
        }
        # The raw loop's client: the settings RedisStore.from_url gives its own.
        self.raw_store = RedisStore.from_url(self.url, coalesce=False, **settings)
        self.raw = self.raw_store.client
        self.claim = redis_store._Script(redis_store._CLAIM)
        self.complete = redis_store._Script(redis_store._COMPLETE)
        for script in (self.claim, self.complete):
            await self.raw.script_load(script.text)
        self.engines = {k: Engine(s) for k, s in self.stores.items()}
        self.policy = Policy.of(lease=60, retention=600, scope=shared)
        for i in range(REPLAY_KEYS):  # the replays' records
            await self.raw_first("replay", i)
            for engine in self.engines.values():
                await engine.handle(self.call(f"replay-{i}"), self.tool)

    async def aclose(self) -> None:
        for engine in self.engines.values():
            await engine.aclose()
        await self.raw_store.aclose()

    @staticmethod
    async def tool() -> Outcome:
        return Outcome(result={**RESULT, "isError": False})

    def call(self, key: str) -> ToolCall:
        return ToolCall(
            name="pay",
            arguments={"order": {"order_id": key, "amount": 4200}},
            key=key,
            policy=self.policy,
        )

    async def raw_first(self, tag: str, i: int) -> None:
        name = f"raw-{self.tag}:{tag}-{i}"
        assert await self.raw.evalsha(self.claim.sha, 1, name, FP, "owner", 60_000) == 1
        reply = await self.raw.evalsha(self.complete.sha, 1, name, "owner", OUTCOME, 600_000, 0, FP)
        assert reply == 1

    async def raw_replay(self, i: int) -> None:
        name = f"raw-{self.tag}:replay-{i % REPLAY_KEYS}"
        reply = await self.raw.evalsha(self.claim.sha, 1, name, FP, "other", 60_000)
        assert isinstance(reply, bytes)

    async def lone_latency(self, calls: int, into: dict[str, list[int]]) -> None:
        """Concurrency 1, call by call: coalescing on, then off, alternately (ns per call)."""
        run = next(_RUNS)
        for i in range(calls):
            for mode, engine in self.engines.items():
                t = time.perf_counter_ns()
                await engine.handle(self.call(f"lone{run}-{i}"), self.tool)
                into.setdefault(f"{mode} first {self.tag}", []).append(time.perf_counter_ns() - t)
                t = time.perf_counter_ns()
                await engine.handle(self.call(f"replay-{i % REPLAY_KEYS}"), self.tool)
                into.setdefault(f"{mode} replay {self.tag}", []).append(time.perf_counter_ns() - t)

    async def measure(self, samples: Samples, c: int, seconds: float) -> None:
        run = next(_RUNS)
        p = f"{self.tag}"

        async def raw_first(w: int, i: int) -> None:
            await self.raw_first(f"r{run}-{w}", i)

        async def raw_replay(w: int, i: int) -> None:
            await self.raw_replay(w * 7919 + i)

        samples.add(f"raw first {p}", c, await run_workers(c, seconds, raw_first))
        samples.add(f"raw replay {p}", c, await run_workers(c, seconds, raw_replay))
        for mode, engine in self.engines.items():

            async def first(w: int, i: int, engine: Engine = engine) -> None:
                out = await engine.handle(self.call(f"r{run}-{w}-{i}"), self.tool)
                assert not out.replayed

            async def replay(w: int, i: int, engine: Engine = engine) -> None:
                out = await engine.handle(self.call(f"replay-{(w * 7919 + i) % REPLAY_KEYS}"),
                                          self.tool)  # fmt: skip
                assert out.replayed

            samples.add(f"it-{mode} first {p}", c, await run_workers(c, seconds, first))
            samples.add(f"it-{mode} replay {p}", c, await run_workers(c, seconds, replay))


# -- redis-benchmark and Powertools ---------------------------------------------------------------


def redis_benchmark(port: int, c: int, samples: Samples, seconds: float) -> None:
    """EVALSHA of the claim script: random new keys (claims) and one completed key (replays)."""
    claim = redis_store._Script(redis_store._CLAIM)
    n = max(2000, int(seconds * 40_000))
    for name, key in (("rb claim", "rb:__rand_int__"), ("rb replay", "raw-rb:done")):
        argv = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(c),
                "-n", str(n), "-r", "100000000", "-q",
                "EVALSHA", claim.sha, "1", key, FP, "owner", "60000"]  # fmt: skip
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
        found = re.findall(r"([\d.]+) requests per second", out)
        if found:
            samples.add(name, c, (float(found[-1]), None))


def powertools_setup(port: int, parser: type) -> Callable[..., Any] | str:
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
    client = redis.Redis(connection_pool=redis.ConnectionPool(port=port, parser_class=parser))
    layer = RedisCachePersistenceLayer(client=client)

    @idempotent_function(  # type: ignore[untyped-decorator]  # an optional, unstubbed extra
        data_keyword_argument="order",
        persistence_store=layer,
        config=IdempotencyConfig(expires_after_seconds=600),
        key_prefix="pt",
    )
    def pay(order: dict[str, Any]) -> dict[str, Any]:
        return RESULT

    for i in range(REPLAY_KEYS):
        pay(order={"order_id": f"replay-{i}", "amount": 4200})
    return pay  # type: ignore[no-any-return]


def powertools_measure(
    pay: Callable[..., Any], pool: ThreadPoolExecutor, c: int, seconds: float, samples: Samples,
    tag: str,
) -> None:  # fmt: skip
    run = next(_RUNS)

    def worker(w: int, replay: bool, deadline: float) -> int:
        i = 0
        while time.perf_counter() < deadline:
            oid = f"replay-{(w * 7919 + i) % REPLAY_KEYS}" if replay else f"r{run}-{w}-{i}"
            pay(order={"order_id": oid, "amount": 4200})
            i += 1
        return i

    for kind, replay in (("first", False), ("replay", True)):
        clock = Clock()
        futures = [pool.submit(worker, w, replay, clock.wall + seconds) for w in range(c)]
        samples.add(f"pt {kind} {tag}", c, clock.rates(sum(f.result() for f in futures)))


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.2, help="per configuration and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lone", type=int, default=1000, help="calls in the latency comparison")
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found on PATH")
    parsers: list[tuple[str, type, type]] = [("py", _AsyncRESP2Parser, _RESP2Parser)]
    if HIREDIS_AVAILABLE:
        parsers.append(("hiredis", _AsyncHiredisParser, _HiredisParser))
    samples = Samples()
    started = time.perf_counter()
    with (
        private_redis("--maxmemory-policy", "noeviction") as port,
        ThreadPoolExecutor(max(CONCURRENCY)) as pool,
    ):
        url = f"redis://127.0.0.1:{port}/0"
        loop = asyncio.new_event_loop()
        rows = [AsyncRows(url, async_parser, tag) for tag, async_parser, _ in parsers]
        for r in rows:
            loop.run_until_complete(r.setup())
        pts = {tag: powertools_setup(port, sync_parser) for tag, _, sync_parser in parsers}
        redis.Redis(port=port).eval(
            "redis.call('HSET', KEYS[1], 's', 'c', 'f', ARGV[1], 'o', 'owner', 'v', ARGV[2]) "
            "redis.call('PEXPIRE', KEYS[1], 600000)",
            1,
            "raw-rb:done",
            FP,
            OUTCOME,
        )
        # Untimed warm-up at every concurrency: pools grow to their size, caches fill.
        for c in CONCURRENCY:
            for r in rows:
                loop.run_until_complete(r.measure(Samples(), c, 0.1))
            for tag, pay in pts.items():
                if not isinstance(pay, str):
                    powertools_measure(pay, pool, c, 0.1, Samples(), tag)
        for rnd in range(args.rounds):
            for c in CONCURRENCY:
                for r in rows:
                    loop.run_until_complete(r.measure(samples, c, args.seconds))
                for tag, pay in pts.items():
                    if not isinstance(pay, str):
                        powertools_measure(pay, pool, c, args.seconds, samples, tag)
                redis_benchmark(port, c, samples, args.seconds)
            print(f"  round {rnd + 1}/{args.rounds} done", file=sys.stderr)
        lone: dict[str, list[int]] = {}
        for r in rows:
            loop.run_until_complete(r.lone_latency(args.lone, lone))
        for r in rows:
            loop.run_until_complete(r.aclose())
        loop.close()
    tags = [tag for tag, _, _ in parsers]
    report(samples, tags, pts, args, time.perf_counter() - started)
    print()
    print(f"### Concurrency 1, latency: {args.lone} calls each, coalescing on and off alternately")
    print()
    print("| parser | first, on µs | off µs | on ÷ off | replay, on µs | off µs | on ÷ off |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for tag in tags:
        cells = []
        for kind in ("first", "replay"):
            on = statistics.median(lone[f"on {kind} {tag}"]) / 1000
            off = statistics.median(lone[f"off {kind} {tag}"]) / 1000
            cells.append(f"{on:.0f} | {off:.0f} | **{on / off:.2f}×**")
        print(f"| {tag} | " + " | ".join(cells) + " |")


def report(samples: Samples, tags: list[str], pts: dict[str, Any], args: Any, took: float) -> None:
    print(f"Python {sys.version.split()[0]}, redis-py {redis.__version__}, hiredis "
          f"{'installed' if HIREDIS_AVAILABLE else 'not installed'}; {args.rounds} rounds × "
          f"{args.seconds} s per cell, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, {took:.0f} s")  # fmt: skip
    print("Cells: median of the rounds (min–max). Ratios: of medians, this run.")
    header = "| row | parser | " + " | ".join(f"c={c}" for c in CONCURRENCY) + " |"
    rule = "|---|---|" + "---:|" * len(CONCURRENCY)

    def ratio_row(label: str, tag: str, num: str, den: str, cpu: bool, halve: bool) -> None:
        cells = []
        for c in CONCURRENCY:
            a, b = samples.median(num, c, cpu=cpu), samples.median(den, c, cpu=cpu)
            if a is None or b is None:
                cells.append("–")
            else:
                cells.append(f"**{a / (b / 2 if halve else b):.2f}×**")
        print(f"| {label} | {tag} | " + " | ".join(cells) + " |")

    for kind in ("first", "replay"):
        for cpu in (False, True):
            title = "First executions" if kind == "first" else "Replays"
            unit = "per CPU-second of the client process" if cpu else "per second"
            print()
            print(f"### {title} {unit}")
            print()
            print(header)
            print(rule)
            for tag in tags:
                calls = "2 EVALSHA" if kind == "first" else "1 EVALSHA"
                rows = [
                    (f"naive raw loop ({calls})", f"raw {kind} {tag}"),
                    ("idemtools, coalescing on", f"it-on {kind} {tag}"),
                    ("idemtools, coalescing off", f"it-off {kind} {tag}"),
                ]
                if not isinstance(pts.get(tag), str):
                    rows.append(("Powertools, thread pool", f"pt {kind} {tag}"))
                for label, name in rows:
                    cells = " | ".join(samples.cell(name, c, cpu=cpu) for c in CONCURRENCY)
                    print(f"| {label} | {tag} | {cells} |")
            rb = "rb claim" if kind == "first" else "rb replay"
            if not cpu:
                what = "EVALSHA claim ÷ 2" if kind == "first" else "EVALSHA claim, completed key"
                cells = []  # type: ignore[assignment]  # a str above, a list of cells here
                for c in CONCURRENCY:
                    v = samples.median(rb, c)
                    cells.append("–" if v is None else f"{v / (2 if kind == 'first' else 1):,.0f}")  # type: ignore[attr-defined]
                print(f"| redis-benchmark ceiling ({what}) | C | " + " | ".join(cells) + " |")
            for tag in tags:
                ratio_row("idemtools on ÷ raw loop", tag, f"it-on {kind} {tag}",
                          f"raw {kind} {tag}", cpu, False)  # fmt: skip
                ratio_row("idemtools on ÷ off", tag, f"it-on {kind} {tag}",
                          f"it-off {kind} {tag}", cpu, False)  # fmt: skip
                if not isinstance(pts.get(tag), str):
                    ratio_row("idemtools on ÷ Powertools", tag, f"it-on {kind} {tag}",
                              f"pt {kind} {tag}", cpu, False)  # fmt: skip
                if not cpu:
                    ratio_row("idemtools on ÷ ceiling", tag, f"it-on {kind} {tag}", rb, cpu,
                              kind == "first")  # fmt: skip
            if len(tags) == 2:
                for label, name in (("raw loop", "raw"), ("idemtools on", "it-on")):
                    ratio_row(f"{label}: hiredis ÷ py parser", "", f"{name} {kind} hiredis",
                              f"{name} {kind} py", cpu, False)  # fmt: skip
    for tag, pay in pts.items():
        if isinstance(pay, str):
            print(f"Powertools ({tag}): {pay}")


if __name__ == "__main__":
    main()
