"""Throughput on one Redis at concurrency 1, 8 and 64, side by side in one run (not a test).

    python benchmarks/bench_throughput.py [--seconds 0.4] [--rounds 3]

Needs `redis-server` and `redis-benchmark` on PATH; starts a private redis-server on a free port
(so the shared one is not loaded) and stops it at the end. Optional: hiredis (then both parsers
are measured) and `aws-lambda-powertools[redis]` (the Powertools rows); `pip install -e
".[bench]"` installs both. Runs about two minutes with the defaults.

Every configuration runs `--rounds` times for `--seconds` each, interleaved (all of round 1,
then all of round 2...) so that the machine's drift hits all alike; the table shows the median
and the range, and ratios of medians measured in this run. Rows:

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
import contextlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
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


@dataclass
class Samples:
    values: dict[tuple[str, int], list[float]] = field(default_factory=dict)

    def add(self, name: str, c: int, per_second: float) -> None:
        self.values.setdefault((name, c), []).append(per_second)

    def median(self, name: str, c: int) -> float | None:
        got = self.values.get((name, c))
        return statistics.median(got) if got else None

    def cell(self, name: str, c: int) -> str:
        got = self.values.get((name, c))
        if not got:
            return "–"
        return f"{statistics.median(got):,.0f} ({min(got) / 1000:.1f}–{max(got) / 1000:.1f} k)"


# -- private redis-server -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_redis() -> Iterator[int]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", tmp, "--maxmemory-policy", "noeviction"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = redis.Redis(port=port)
            for _ in range(100):
                with contextlib.suppress(redis.ConnectionError):
                    client.ping()
                    break
                time.sleep(0.05)
            client.close()
            yield port
        finally:
            proc.terminate()
            proc.wait(timeout=10)


# -- the async rows -------------------------------------------------------------------------------


async def run_workers(c: int, seconds: float, one: Callable[[int, int], Awaitable[None]]) -> float:
    """`c` workers calling `one(worker, i)` until the time is up; calls per second."""
    done = [0] * c
    deadline = time.perf_counter() + seconds

    async def worker(w: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            await one(w, i)
            i += 1
        done[w] = i

    t = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(c)))
    return sum(done) / (time.perf_counter() - t)


class AsyncRows:
    """Raw loop and idemtools (coalescing on and off) on one parser."""

    def __init__(self, url: str, parser: type, tag: str) -> None:
        self.url, self.parser, self.tag = url, parser, tag
        self.run_id = 0

    async def setup(self) -> None:
        settings = {"parser_class": self.parser}
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

    async def measure(self, samples: Samples, c: int, seconds: float) -> None:
        self.run_id += 1
        run = self.run_id
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
            samples.add(name, c, float(found[-1]))


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
    client = redis.Redis(port=port, parser_class=parser, max_connections=128)
    layer = RedisCachePersistenceLayer(client=client)

    @idempotent_function(
        data_keyword_argument="order",
        persistence_store=layer,
        config=IdempotencyConfig(expires_after_seconds=600),
        key_prefix="pt",
    )
    def pay(order: dict[str, Any]) -> dict[str, Any]:
        return RESULT

    for i in range(REPLAY_KEYS):
        pay(order={"order_id": f"replay-{i}", "amount": 4200})
    return pay


def powertools_measure(
    pay: Callable[..., Any], pool: ThreadPoolExecutor, c: int, seconds: float, samples: Samples,
    run: int, tag: str,
) -> None:  # fmt: skip
    def worker(w: int, replay: bool, deadline: float) -> int:
        i = 0
        while time.perf_counter() < deadline:
            oid = f"replay-{(w * 7919 + i) % REPLAY_KEYS}" if replay else f"r{run}-{w}-{i}"
            pay(order={"order_id": oid, "amount": 4200})
            i += 1
        return i

    for kind, replay in (("first", False), ("replay", True)):
        t = time.perf_counter()
        futures = [pool.submit(worker, w, replay, t + seconds) for w in range(c)]
        total = sum(f.result() for f in futures)
        samples.add(f"pt {kind} {tag}", c, total / (time.perf_counter() - t))


# -- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.4, help="per configuration and round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    for tool in ("redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} not found on PATH")
    parsers = [("py", _AsyncRESP2Parser, _RESP2Parser)]
    if HIREDIS_AVAILABLE:
        parsers.append(("hiredis", _AsyncHiredisParser, _HiredisParser))
    samples = Samples()
    started = time.perf_counter()
    with private_redis() as port, ThreadPoolExecutor(max(CONCURRENCY)) as pool:
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
        for rnd in range(args.rounds):
            for c in CONCURRENCY:
                for r in rows:
                    loop.run_until_complete(r.measure(samples, c, args.seconds))
                for tag, pay in pts.items():
                    if not isinstance(pay, str):
                        powertools_measure(pay, pool, c, args.seconds, samples, rnd, tag)
                redis_benchmark(port, c, samples, args.seconds)
            print(f"  round {rnd + 1}/{args.rounds} done", file=sys.stderr)
        for r in rows:
            loop.run_until_complete(r.aclose())
        loop.close()
    report(samples, [tag for tag, _, _ in parsers], pts, args, time.perf_counter() - started)


def report(samples: Samples, tags: list[str], pts: dict[str, Any], args: Any, took: float) -> None:
    m = samples.median
    print(f"Python {sys.version.split()[0]}, redis-py {redis.__version__}, hiredis "
          f"{'installed' if HIREDIS_AVAILABLE else 'not installed'}; {args.rounds} rounds × "
          f"{args.seconds} s per cell, {os.cpu_count()} CPUs, {took:.0f} s")  # fmt: skip
    print("Calls per second: median of the rounds (range). Ratios are of medians, this run.")
    print()
    header = "| row | parser | " + " | ".join(f"c={c}" for c in CONCURRENCY) + " |"
    rule = "|---|---|" + "---:|" * len(CONCURRENCY)
    for kind in ("first", "replay"):
        title = "first executions/s" if kind == "first" else "replays/s"
        print(f"### {title}")
        print()
        print(header)
        print(rule)
        rows = []
        for tag in tags:
            rows.append((f"naive raw loop ({'2 EVALSHA' if kind == 'first' else '1 EVALSHA'})",
                         tag, f"raw {kind} {tag}"))  # fmt: skip
            rows.append(("idemtools, coalescing on", tag, f"it-on {kind} {tag}"))
            rows.append(("idemtools, coalescing off", tag, f"it-off {kind} {tag}"))
            if not isinstance(pts.get(tag), str):
                rows.append(("Powertools, thread pool", tag, f"pt {kind} {tag}"))
        for label, tag, name in rows:
            cells = " | ".join(samples.cell(name, c) for c in CONCURRENCY)
            print(f"| {label} | {tag} | {cells} |")
        rb = "rb claim" if kind == "first" else "rb replay"
        cells = []
        for c in CONCURRENCY:
            v = m(rb, c)
            cells.append("–" if v is None else f"{v / (2 if kind == 'first' else 1):,.0f}")
        what = "EVALSHA claim ÷ 2" if kind == "first" else "EVALSHA claim, completed key"
        print(f"| redis-benchmark ceiling ({what}) | C | " + " | ".join(cells) + " |")
        for tag in tags:
            for label, num, den in (
                ("idemtools on ÷ raw loop", f"it-on {kind} {tag}", f"raw {kind} {tag}"),
                ("idemtools on ÷ off", f"it-on {kind} {tag}", f"it-off {kind} {tag}"),
                ("idemtools on ÷ Powertools", f"it-on {kind} {tag}", f"pt {kind} {tag}"),
                ("idemtools on ÷ ceiling", f"it-on {kind} {tag}", rb),
            ):
                ratio = []
                for c in CONCURRENCY:
                    a, b = m(num, c), m(den, c)
                    if a is None or b is None:
                        ratio.append("–")
                        continue
                    if den == rb and kind == "first":
                        b /= 2
                    ratio.append(f"**{a / b:.2f}×**")
                print(f"| {label} | {tag} | " + " | ".join(ratio) + " |")
        if len(tags) == 2:
            for label, name in (("raw loop", "raw"), ("idemtools on", "it-on")):
                ratio = []
                for c in CONCURRENCY:
                    a, b = m(f"{name} {kind} hiredis", c), m(f"{name} {kind} py", c)
                    ratio.append("–" if a is None or b is None else f"{a / b:.2f}×")
                print(f"| {label}: hiredis ÷ py parser | | " + " | ".join(ratio) + " |")
        print()
    for tag, pay in pts.items():
        if isinstance(pay, str):
            print(f"Powertools ({tag}): {pay}")


if __name__ == "__main__":
    main()
