"""tools/call round trips over the SDK's in-memory transport: what idemtools costs per call.

    python benchmarks/bench_mcp.py            # the installed mcp line
    python benchmarks/bench_mcp.py --calls 3000
    python benchmarks/bench_mcp.py --otel     # with an OpenTelemetry SDK installed (no exporter)

Four kinds of call, interleaved in a freshly shuffled order every round so that machine noise
and after-effects of the previous call hit them alike, each sent through the same client path
(a `CallToolRequest` built by hand): a bare server without idemtools, and with idemtools
installed (MemoryStore) a keyed first execution, a replay, and an unkeyed call.
Medians and ratios to bare; goals: first ≤ 1.30x on Python 3.11 and ≤ 1.25x from 3.12 on,
replay ≤ 1.0x, unkeyed ≤ 1.02x.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio

import idemtools
from idemtools.client.call import _sdk  # type: ignore[attr-defined]  # the same send path the client helper uses
from idemtools.server.adapters import SDK2

if SDK2:
    from mcp.client import Client
    from mcp.server.mcpserver import MCPServer as Server
else:
    from mcp.server.fastmcp import FastMCP as Server
    from mcp.shared.memory import create_connected_server_and_client_session


def build(with_idemtools: bool) -> Any:
    server = Server("bench")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    if with_idemtools:
        idemtools.install(server)
    return server


@contextlib.asynccontextmanager
async def connect(server: Any) -> AsyncIterator[Any]:
    if SDK2:
        async with Client(server, mode="legacy") as client:
            yield client.session
    else:
        async with create_connected_server_and_client_session(server._mcp_server) as session:
            yield session


async def timed(session: Any, key: str | None) -> float:
    start = time.perf_counter()
    await _sdk.send_call(session, "add", {"a": 1, "b": 2}, key, None)  # type: ignore[arg-type]
    return time.perf_counter() - start


async def main(calls: int) -> None:
    samples: dict[str, list[float]] = {k: [] for k in ("bare", "first", "replay", "unkeyed")}
    async with connect(build(False)) as bare, connect(build(True)) as idem:
        await timed(idem, "warm-replay")
        for _ in range(50):  # warm both paths
            await timed(bare, None)
            await timed(idem, None)
        kinds = list(samples)
        for _ in range(calls):
            random.shuffle(kinds)
            for kind in kinds:
                session = bare if kind == "bare" else idem
                key = {"first": uuid.uuid4().hex, "replay": "warm-replay"}.get(kind)
                samples[kind].append(await timed(session, key))
    version = importlib.metadata.version("mcp")
    base = statistics.median(samples["bare"])
    first = "<= 1.30" if sys.version_info < (3, 12) else "<= 1.25"
    goals = {"bare": "", "first": first, "replay": "<= 1.00", "unkeyed": "<= 1.02"}
    print(f"mcp {version}, in-memory transport, {calls} calls each (medians)")
    print(f"{'call':<10}{'median us':>12}{'x bare':>9}  goal")
    for kind, values in samples.items():
        median = statistics.median(values)
        print(f"{kind:<10}{median * 1e6:>12.1f}{median / base:>9.3f}  {goals[kind]}")


def install_sdk() -> None:
    """Record spans and metrics (the SDK's work, no export): the cost of turning OTel on, for
    the bare server too (mcp 2.x makes its own `tools/call` span)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--otel", action="store_true", help="install an OpenTelemetry SDK first")
    args = parser.parse_args()
    if args.otel:
        install_sdk()
        print("with an OpenTelemetry SDK installed (spans and metrics recorded, not exported)")
    anyio.run(main, args.calls)
