"""The stdio default store (SQLite in the user's state directory) against MemoryStore (not a test).

    python benchmarks/bench_default_store.py [--calls 2000] [--starts 5]

Three measurements, each with a temporary XDG_STATE_HOME (nothing of the real home is touched):

1. Start-up in process: choosing the store and its first operation (the server's start-up check
   reads one absent record): `stdio_default_store()` + `get()` vs `MemoryStore()` + `get()`,
   on a new file (the first start of a server) and on the file an earlier start left (every
   later start, e.g. a host that starts a server process per call).
2. Per keyed call in process: one claim and one complete (a first execution) and one claim of a
   completed key (a replay), medians over `--calls`.
3. A whole stdio server process, as a host starts one: spawn tests/e2e/boundary_server.py,
   initialize, one keyed call, exit; median of `--starts`, default store vs
   `IDEMTOOLS_STORE=memory://`.

Prints each pair and its ratio (default / memory).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from idemtools.stores.base import Store  # noqa: E402
from idemtools.stores.default import stdio_default_store  # noqa: E402
from idemtools.stores.memory import MemoryStore  # noqa: E402

OUTCOME = b'{"result":{"content":[{"type":"text","text":"done"}]}}'


async def startup(make: Callable[[], Store]) -> float:
    started = time.perf_counter()
    store = make()
    await store.get("scope", "startup-check")
    elapsed = time.perf_counter() - started
    await store.aclose()
    return elapsed


async def per_call(store: Store, calls: int) -> tuple[float, float]:
    first: list[float] = []
    replay: list[float] = []
    for i in range(calls):
        key = f"k-{i}"
        t0 = time.perf_counter()
        await store.claim("scope", key, "fp", "owner", 60.0)
        await store.complete("scope", key, "owner", OUTCOME, 600.0, fingerprint="fp")
        t1 = time.perf_counter()
        await store.claim("scope", key, "fp", "other", 60.0)
        t2 = time.perf_counter()
        first.append(t1 - t0)
        replay.append(t2 - t1)
    await store.aclose()
    return statistics.median(first), statistics.median(replay)


async def one_process(env: dict[str, str], ledger: str) -> float:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from idemtools.client import NO_RETRY, call_tool

    server = ROOT / "tests" / "e2e" / "boundary_server.py"
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(server), "sdk", "stdio", ledger, "default"],
        env=env,
        cwd=str(ROOT),
    )
    started = time.perf_counter()
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (opening /dev/null never blocks)
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await call_tool(
                session, "work", {"label": "b"}, idempotency_key=str(uuid.uuid4()), retry=NO_RETRY
            )
    return time.perf_counter() - started


def row(what: str, default: float, memory: float, unit: str = "µs", scale: float = 1e6) -> None:
    print(
        f"| {what} | {default * scale:,.1f} {unit} | {memory * scale:,.1f} {unit} "
        f"| {default / memory:.2f}× |"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        os.environ["XDG_STATE_HOME"] = home
        print("| measurement | default (SQLite) | MemoryStore | ratio |")
        print("|---|---|---|---|")
        names = iter(range(1_000_000))
        default_starts = [
            await startup(lambda: stdio_default_store(f"bench-{next(names)}")) for _ in range(20)
        ]
        memory_starts = [await startup(MemoryStore) for _ in range(20)]
        row(
            "start-up: store + first read",
            statistics.median(default_starts),
            statistics.median(memory_starts),
        )
        again_starts = [await startup(lambda: stdio_default_store("bench-0")) for _ in range(20)]
        row(
            "start-up again: the file exists",
            statistics.median(again_starts),
            statistics.median(memory_starts),
        )
        d_first, d_replay = await per_call(stdio_default_store("bench-calls"), args.calls)
        m_first, m_replay = await per_call(MemoryStore(), args.calls)
        row("per call: claim + complete", d_first, m_first)
        row("per call: replay (claim)", d_replay, m_replay)
        base = {k: v for k, v in os.environ.items() if k != "IDEMTOOLS_STORE"}
        base["PYTHONPATH"] = str(ROOT)
        ledger = str(Path(home) / "ledger")
        runs: dict[str, list[float]] = {"default": [], "memory": []}
        for _ in range(args.starts):  # interleaved, so drift hits both alike
            runs["default"].append(await one_process(base, ledger))
            runs["memory"].append(
                await one_process({**base, "IDEMTOOLS_STORE": "memory://"}, ledger)
            )
        row(
            "stdio process: start, initialize, 1 keyed call",
            statistics.median(runs["default"]),
            statistics.median(runs["memory"]),
            unit="ms",
            scale=1e3,
        )


if __name__ == "__main__":
    asyncio.run(main())
