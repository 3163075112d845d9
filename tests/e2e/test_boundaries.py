"""The end of a transport, and a process told to stop, with a keyed call in flight: the
call finishes and is recorded before the process exits; the retry on a new
process replays it. Real server processes (`boundary_server.py`), SQLiteStore in a tmp dir,
the SDK's own server type (FastMCP on mcp 1.x, MCPServer on mcp 2.x); standalone FastMCP in
tests/fastmcp/test_boundaries.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import boundaries
from .boundaries import Box

pytestmark = pytest.mark.slow


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path, "sdk")


@pytest.mark.parametrize("how", ["eof", "sigterm", "sigint"])
def test_stdio_end_records_the_call_in_flight(box: Box, how: str) -> None:
    boundaries.stdio_end(box, how)


def test_a_second_ctrl_c_exits_at_once(box: Box) -> None:
    boundaries.stdio_second_interrupt(box)


def test_shutdown_grace_bounds_the_wait(box: Box) -> None:
    boundaries.stdio_grace_ends(box)


def test_an_application_sigterm_handler_is_chained_to(box: Box) -> None:
    boundaries.stdio_user_sigterm_handler(box)


@pytest.mark.parametrize("runner", ["uvicorn", "http"])
def test_http_sigterm_records_the_call_in_flight(box: Box, runner: str) -> None:
    boundaries.http_sigterm(box, runner)
