"""How close idemtools' keyed first execution is to the least such a call can cost.

    python benchmarks/bench_mcp_floor.py              # mcp 2.x only
    python benchmarks/bench_mcp_floor.py --calls 3000
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=cg.out.%p \
        python benchmarks/bench_mcp_floor.py --callgrind --calls 300   # instructions, per server
    python benchmarks/bench_mcp_floor.py --only "contract floor"     # bare and one server

`bench_mcp.py`'s client path and in-memory transport; a bare server beside the keyed ones (all
three, or those named by `--only`), interleaved in a freshly shuffled order every round:

* bare: no idemtools;
* dict floor: a middleware that deduplicates in a plain dict (SHA-256 of orjson's sorted
  arguments, an exact-size copy of the outcome's orjson bytes) and nothing else: no scope, no
  lease, no bounds, no expiry, no owner token, no cancellation protection. Less than the
  contract allows;
* contract floor: the same middleware doing, flat in one function and each in the cheapest way
  found, the steps docs/contract.md asks of a keyed first execution: the key's check, a scope per
  connection, the RFC 8785 fingerprint (`idemtools.canonical`), an owner token (idemtools'
  `new_owner`), a claim with a lease under a lock, a per-scope quota and a byte budget, the
  lease keeper's registration, a record with its retention fenced by owner, an exact-size copy
  of the outcome. No telemetry, no hooks, no cancellation protection, no layering;
* idemtools: `install(server)` with MemoryStore, keyed.

Medians and ratios to bare. The floors are measurement devices, not code to use: they skip what
a server needs around those steps (refusals as values, error outcomes, the expiry sweep, the
keeper's thread, the shutdown paths). What they show is how much of the keyed call's cost is
the contract's own work on this runtime, and how much is idemtools'.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import heapq
import importlib.metadata
import random
import statistics
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import orjson
from bench_mcp import build, connect, timed

from idemtools.canonical import fingerprint
from idemtools.engine.decision import new_owner
from idemtools.server.adapters import SDK2

LEASE = 60.0
RETENTION = 86_400.0
QUOTA = 10_000  # live records per scope: MemoryStore's default (records live for RETENTION)
RESERVE = 400  # bytes counted per record besides its outcome
MAX_BYTES = 256 << 20


class DictFloor:
    """Deduplicate keyed calls in a dict: the least any deduplication can do."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[bytes, bytes | None]] = {}

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not params:
            return await call_next(ctx)
        key = params.get("idempotencyKey")
        if key is None:
            return await call_next(ctx)
        fp = hashlib.sha256(
            orjson.dumps(params.get("arguments"), option=orjson.OPT_SORT_KEYS)
        ).digest()
        found = self.records.get(key)
        if found is not None and found[1] is not None:
            return orjson.loads(found[1])
        self.records[key] = (fp, None)
        result = await call_next(ctx)
        self.records[key] = (fp, memoryview(orjson.dumps(result)).tobytes())  # exact size
        return result


class ContractFloor:
    """Every step docs/contract.md asks of a keyed first execution, flat, each at its cheapest."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[tuple[str, str], tuple[str, str, float]] = {}
        self.done: dict[tuple[str, str], tuple[str, str, float, bytes]] = {}
        self.heap: list[tuple[float, tuple[str, str]]] = []
        self.bytes = 0
        self.per_scope: dict[str, int] = {}
        self.live: set[object] = set()  # the lease keeper's registrations
        self.scopes: dict[int, str] = {}  # id(connection) → its scope, made once

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not params or ctx.request_id is None:
            return await call_next(ctx)
        key = params.get("idempotencyKey")
        if key is None:
            return await call_next(ctx)
        if not isinstance(key, str) or not 1 <= len(key) <= 255:
            raise ValueError("invalid key")  # a refusal in the real thing
        name, arguments = params.get("name"), params.get("arguments")
        # Per connection: `ctx.session` is a new object per request, its `Connection` is not.
        connection = ctx.session._connection
        scope = self.scopes.get(id(connection))
        if scope is None:
            scope = self.scopes[id(connection)] = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
        fp = fingerprint(name, arguments)
        rid = (scope, key)
        owner = new_owner(time.time())  # idemtools' own: random bits drawn in batches
        now = time.monotonic()
        lock = self.lock
        lock.acquire()  # not `with`: cheaper, as idemtools does
        try:
            found = self.done.get(rid)
            if found is not None and found[2] > now:
                return orjson.loads(found[3])  # a replay (the fingerprint check skipped)
            claim = self.running.get(rid)
            if claim is not None and claim[2] > now:  # a lapsed claim is simply replaced
                raise ValueError("in progress")
            if self.per_scope.get(scope, 0) >= QUOTA or self.bytes + RESERVE > MAX_BYTES:
                raise ValueError("quota")
            self.running[rid] = (fp, owner, now + LEASE)  # no heap: leases checked on read
            self.per_scope[scope] = self.per_scope.get(scope, 0) + 1
            self.bytes += RESERVE
            lease = (rid, owner)
            self.live.add(lease)
        finally:
            lock.release()
        result = await call_next(ctx)
        outcome = memoryview(orjson.dumps(result)).tobytes()
        lock.acquire()
        try:
            self.live.discard(lease)
            claim = self.running.get(rid)
            if claim is not None and claim[1] == owner:  # fenced by owner
                del self.running[rid]
                self.done[rid] = (fp, owner, now + RETENTION, outcome)
                self.bytes += len(outcome)
                heapq.heappush(self.heap, (now + RETENTION, rid))  # the expiry sweep's
        finally:
            lock.release()
        return result


def build_floor(middleware: Any) -> Any:
    server = build(False)
    server._lowlevel_server.middleware.append(middleware)
    return server


SERVERS: dict[str, Callable[[], Any]] = {
    "dict floor": lambda: build_floor(DictFloor()),
    "contract floor": lambda: build_floor(ContractFloor()),
    "idemtools": lambda: build(True),
}


@contextlib.asynccontextmanager
async def sessions(only: list[str]) -> AsyncIterator[dict[str, Any]]:
    """A session per server, bare first: all of them, or bare and those `only` names."""
    async with contextlib.AsyncExitStack() as stack:
        found = {"bare": await stack.enter_async_context(connect(build(False)))}
        for name, make in SERVERS.items():
            if not only or name in only:
                found[name] = await stack.enter_async_context(connect(make()))
        for _ in range(100):  # warm every path
            for kind, session in found.items():
                await timed(session, None if kind == "bare" else uuid.uuid4().hex)
        yield found


async def instructions(calls: int, only: list[str]) -> None:
    """Under callgrind: each server's block of keyed first executions dumped as its own part."""
    from bench_mcp_callgrind import control

    async with sessions(only) as found:
        for kind, session in found.items():
            keys = [None if kind == "bare" else uuid.uuid4().hex for _ in range(calls)]
            control("-i", "on")
            for key in keys:
                await timed(session, key)
            control("-i", "off")
            control("-d", kind.replace(" ", "-"))


async def main(calls: int, only: list[str]) -> None:
    async with sessions(only) as found:
        samples: dict[str, list[float]] = {kind: [] for kind in found}
        kinds = list(samples)
        for _ in range(calls):
            random.shuffle(kinds)
            for kind in kinds:
                key = None if kind == "bare" else uuid.uuid4().hex
                samples[kind].append(await timed(found[kind], key))
    base = statistics.median(samples["bare"])
    version = importlib.metadata.version("mcp")
    print(f"mcp {version}, in-memory transport, {calls} keyed first executions each (medians)")
    print(f"{'server':<16}{'median us':>12}{'x bare':>9}")
    for kind, values in samples.items():
        median = statistics.median(values)
        print(f"{kind:<16}{median * 1e6:>12.1f}{median / base:>9.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--callgrind", action="store_true", help="count instructions (run under callgrind)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(SERVERS),
        default=[],
        help="measure bare and this server only (repeatable): fewer servers share the caches",
    )
    args = parser.parse_args()
    if not SDK2:
        raise SystemExit("bench_mcp_floor.py measures mcp 2.x (its server middleware)")
    anyio.run(instructions if args.callgrind else main, args.calls, args.only)
