"""A stub ladder: the keyed first execution's time with some of idemtools' steps made constant.

    python benchmarks/bench_mcp_ladder.py                       # nothing stubbed
    python benchmarks/bench_mcp_ladder.py --stub store
    python benchmarks/bench_mcp_ladder.py --stub keeper,fingerprint,scope,owner,store,worker,context

A measurement device for the performance history ("The floor"), never a way to run: each stub
breaks the guarantee it stands in for. `bench_mcp.py`'s client path, a bare server and an
idemtools one (MemoryStore) interleaved in a shuffled order every round. It prints the median
ratio of a keyed first execution to a bare call. Stubs (comma-separated):

* keeper: the lease keeper's `hold`/`drop` do nothing;
* fingerprint: a constant fingerprint; scope: a constant scope; owner: a constant owner token;
* store: MemoryStore's `claim`/`complete` are a dict write each;
* worker: the execution's body is awaited inline (no worker, no protection from cancellation);
* context: the adapter's `CallContext` built once and reused.
"""

from __future__ import annotations

import argparse
import random
import statistics
import uuid
from typing import Any

import anyio
from bench_mcp import build, connect, timed

from idemtools.engine import core
from idemtools.engine.lease_keeper import Lease, LeaseKeeper
from idemtools.server.adapters import SDK2
from idemtools.stores.base import Claim
from idemtools.stores.memory import MemoryStore

STUBS = ("keeper", "fingerprint", "scope", "owner", "store", "worker", "context")


def _replace(owner: Any, name: str, value: Any) -> None:
    setattr(owner, name, value)  # the engine's internals, replaced on purpose


def stub(names: list[str]) -> None:
    """Replace the named steps, process-wide (the bare server does not use any of them)."""
    if "keeper" in names:
        one = Lease("scope", "key", "owner", 60.0, 0.0, None)
        _replace(LeaseKeeper, "hold", lambda self, *args, **kwargs: one)
        _replace(LeaseKeeper, "drop", lambda self, held: None)
    if "fingerprint" in names:
        _replace(core, "fingerprint_of", lambda call, key: "a" * 64)
    if "scope" in names:
        _replace(core, "scope_hash", lambda policy, context, key: "b" * 64)
    if "owner" in names:
        _replace(core, "new_owner", lambda now: "c" * 32)
    if "store" in names:
        claimed = Claim(claimed=True)
        records: dict[str, bytes | None] = {}

        async def claim(self: Any, scope: str, key: str, *args: Any) -> Claim:
            records[key] = None
            return claimed

        async def complete(self: Any, scope: str, key: str, owner: str, outcome: bytes, *args: Any, **kwargs: Any) -> bool:  # noqa: E501  # fmt: skip
            records[key] = outcome
            return True

        _replace(MemoryStore, "claim", claim)
        _replace(MemoryStore, "complete", complete)
    if "worker" in names:
        _replace(core, "protect", lambda body, workers: body)
    if "context" in names:
        from idemtools.server.adapters import mcp2

        built = mcp2._context
        once: dict[str, Any] = {}

        def context(ctx: Any, issuer: Any, name: str, arguments: Any) -> Any:
            if "context" not in once:
                once["context"] = built(ctx, issuer, name, arguments)
            return once["context"]

        _replace(mcp2, "_context", context)


async def main(calls: int) -> float:
    samples: dict[str, list[float]] = {"bare": [], "first": []}
    async with connect(build(False)) as bare, connect(build(True)) as idem:
        for _ in range(50):
            await timed(bare, None)
            await timed(idem, uuid.uuid4().hex)
        kinds = list(samples)
        for _ in range(calls):
            random.shuffle(kinds)
            for kind in kinds:
                if kind == "bare":
                    samples[kind].append(await timed(bare, None))
                else:
                    samples[kind].append(await timed(idem, uuid.uuid4().hex))
    return statistics.median(samples["first"]) / statistics.median(samples["bare"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--stub", default="", help=f"comma-separated, of: {', '.join(STUBS)}")
    args = parser.parse_args()
    names = [n for n in args.stub.split(",") if n]
    unknown = sorted(set(names) - set(STUBS))
    if unknown:
        parser.error(f"unknown stubs {unknown}; known: {', '.join(STUBS)}")
    if not SDK2:
        raise SystemExit("bench_mcp_ladder.py measures mcp 2.x")
    stub(names)
    ratio = anyio.run(main, args.calls)
    print(f"stubbed: {args.stub or 'nothing':<60} keyed first execution {ratio:.3f}x bare")
