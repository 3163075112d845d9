"""Tests of the FastMCP 4.x adapter; each module skips when fastmcp 4.x is not installed."""

from __future__ import annotations

import pytest

REASON = (
    "fastmcp 4.x is not installed (pip install -e '.[fastmcp]'); CI runs tests/fastmcp in "
    "its own fastmcp legs"
)


def require_fastmcp() -> None:
    """Skip the calling test module unless fastmcp 4.x is importable."""
    pytest.importorskip("fastmcp", minversion="4.0", reason=REASON)
