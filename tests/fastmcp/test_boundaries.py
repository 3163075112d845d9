"""Standalone FastMCP 4.x at the end of a transport: `FastMCP(...).run()` on
stdio and over HTTP, no main of the application's own. A keyed call in flight when stdin
closes or SIGTERM/SIGINT arrive is recorded before the process exits; the retry on a new
process replays it. Same scenarios as tests/e2e/test_boundaries.py.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.e2e import boundaries  # noqa: E402
from tests.e2e.boundaries import Box  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path, "fastmcp")


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint"])
def test_stdio_end_records_the_call_in_flight(box: Box, how: str) -> None:
    boundaries.stdio_end(box, how)


def test_a_second_ctrl_c_exits_at_once(box: Box) -> None:
    boundaries.stdio_second_interrupt(box)


@pytest.mark.parametrize("runner", ["uvicorn", "http"])
def test_http_sigterm_records_the_call_in_flight(box: Box, runner: str) -> None:
    boundaries.http_sigterm(box, runner)
