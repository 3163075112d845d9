"""`add_fixture_tools` on standalone FastMCP 4.x: the kit passes the server
with `install()` and fails the same server without it, over stdio, in both eras."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import StdioTransport  # noqa: E402

from idemtools.conformance import FIXTURE_TOOLS  # noqa: E402
from idemtools.conformance.contract import executions_of  # noqa: E402
from tests.conformance.kit import run_kit  # noqa: E402
from tests.conformance.test_server_types import assert_idemtools_passes  # noqa: E402

HERE = Path(__file__).resolve().parent
SERVER = [sys.executable, str(HERE / "fixtures_server.py")]
ERAS = ["2025-11-25", "2026-07-28"]


async def test_fixtures_sit_beside_the_servers_own_tools() -> None:
    transport = StdioTransport(
        command=SERVER[0], args=SERVER[1:], env=dict(os.environ), cwd=str(HERE.parents[1])
    )
    async with Client(transport, timeout=60) as client:
        names = {tool.name for tool in await client.list_tools()}
        assert set(FIXTURE_TOOLS) | {"theirs"} <= names
        one = await client.call_tool("sep3182_record", {"label": "a", "payload": [1, {"x": 2}]})
        two = await client.call_tool("sep3182_record", {"label": "a"})
        assert [_count(one), _count(two)] == [1, 2]
        failed = await client.call_tool("sep3182_fail", {"label": "a"}, raise_on_error=False)
        assert failed.is_error and _count(failed) == 3
        assert _count(await client.call_tool("sep3182_count", {"label": "a"})) == 3
        assert (await client.call_tool("theirs", {"x": 4})).data == "theirs 4"


def _count(result: Any) -> int | None:
    content = [{"type": "text", "text": getattr(b, "text", "")} for b in result.content]
    return executions_of({"content": content})


@pytest.mark.slow
def test_fastmcp_server_with_install_passes(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *SERVER)
    assert_idemtools_passes(kit)
    assert kit.report["summary"]["eras"] == ERAS
    assert "sep-3182-duplicate-not-executed" in kit.ids("pass")


@pytest.mark.slow
def test_fastmcp_server_without_install_fails(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *SERVER, "--no-install")
    assert kit.code == 1, kit.out + kit.err
    for era in ERAS:
        assert "sep-3182-duplicate-not-executed" in kit.by_era("fail")[era], kit.out
