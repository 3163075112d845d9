"""The floors of `benchmarks/bench_mcp_floor.py` really deduplicate: a floor that let a retry
run the tool again would be cheaper than the contract allows, and the comparison a fake."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from idemtools.server.adapters import SDK2

pytestmark = pytest.mark.skipif(not SDK2, reason="the floors are mcp 2.x server middlewares")

BENCHMARKS = Path(__file__).parent.parent / "benchmarks"


@pytest.fixture
def floors() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import bench_mcp_floor

        yield bench_mcp_floor
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("floor", ["DictFloor", "ContractFloor"])
def test_a_floor_runs_a_retried_keyed_call_once_and_replays_its_result(
    floors: Any, floor: str
) -> None:
    from mcp.client import Client
    from mcp.server.mcpserver import MCPServer

    from idemtools.client.call import _sdk  # type: ignore[attr-defined]

    runs: list[int] = []
    server = MCPServer("floor")

    @server.tool()
    async def bump(n: int) -> int:
        runs.append(n)
        return len(runs)

    server._lowlevel_server.middleware.append(getattr(floors, floor)())

    async def main() -> list[Any]:
        async with Client(server, mode="legacy") as client:
            session = client.session
            first = await _sdk.send_call(session, "bump", {"n": 1}, "k-1", None)
            again = await _sdk.send_call(session, "bump", {"n": 1}, "k-1", None)
            other = await _sdk.send_call(session, "bump", {"n": 2}, "k-2", None)
            unkeyed = await _sdk.send_call(session, "bump", {"n": 3}, None, None)  # type: ignore[arg-type]
            return [first, again, other, unkeyed]

    first, again, other, unkeyed = anyio.run(main)
    assert runs == [1, 2, 3]  # the retry of k-1 ran nothing
    assert again.structured_content == first.structured_content == {"result": 1}
    assert other.structured_content == {"result": 2}
    assert unkeyed.structured_content == {"result": 3}


def test_the_floor_benchmark_prints_each_server_against_bare() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_mcp_floor.py"), "--calls", "5"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = {line.split("  ")[0].strip() for line in done.stdout.splitlines()[2:]}
    assert rows == {"bare", "dict floor", "contract floor", "idemtools"}
