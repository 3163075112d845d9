"""Instructions per `tools/call` round trip, per kind of call, under callgrind.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=cg.out.%p \
        python benchmarks/bench_mcp_callgrind.py [--calls 300] [--warmup 100]
    # then, per dump: grep '^desc: Trigger\\|^totals:' cg.out.*.*   (totals / calls)

The same four kinds and client path as `bench_mcp.py` (a bare server; with idemtools on
MemoryStore a keyed first execution, a replay, an unkeyed call), warmed up, then each kind in
a block of `--calls` calls with instrumentation switched on only around it
(`callgrind_control -i on|off`) and dumped as its own part (`-d <kind>`). Instruction counts
are steadier than times on a shared machine, but they miss what costs time without
instructions (cache misses, the kernel's work).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import uuid

import anyio
from bench_mcp import build, connect, timed


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


async def main(calls: int, warmup: int) -> None:
    async with connect(build(False)) as bare, connect(build(True)) as idem:
        await timed(idem, "warm-replay")
        for _ in range(warmup):
            await timed(bare, None)
            await timed(idem, None)
            await timed(idem, uuid.uuid4().hex)
            await timed(idem, "warm-replay")
        keys = [uuid.uuid4().hex for _ in range(calls)]
        for kind in ("bare", "first", "replay", "unkeyed"):
            session = bare if kind == "bare" else idem
            control("-i", "on")
            for i in range(calls):
                key = {"first": keys[i], "replay": "warm-replay"}.get(kind)
                await timed(session, key)
            control("-i", "off")
            control("-d", kind)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100, help="rounds of each kind first")
    args = parser.parse_args()
    anyio.run(main, args.calls, args.warmup)
