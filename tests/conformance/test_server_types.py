"""Every server type idemtools supports on this mcp line passes the kit with `add_fixture_tools`
and `install()`; the same server without `install()` fails (issue 17, item 9).

mcp 1.x: FastMCP and the low-level `Server`; mcp 2.x: MCPServer and the low-level `Server`.
Standalone FastMCP 4.x: tests/fastmcp/test_conformance.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from .kit import ERAS, LEGACY, Kit, run_kit, server_command

pytestmark = pytest.mark.slow


def idemtools_may_fail() -> set[str]:
    """The one MUST idemtools fails honestly while its own error codes still lie in the
    -32020..-32099 range the 2026-07-28 base spec reserves (they move in a separate change)."""
    from idemtools.errors import ErrorCodes

    codes = ErrorCodes()
    values = [getattr(codes, f.name) for f in dataclasses.fields(codes)]
    reserved = any(type(v) is int and -32099 <= v <= -32020 for v in values)
    return {"mcp-base-error-codes-reserved"} if reserved else set()


def assert_idemtools_passes(kit: Kit) -> None:
    """Every MUST check that ran passed (but the one above, while it holds): exit 0, or 1 for
    exactly that failure."""
    failed = kit.ids("fail", "MUST") | kit.ids("blocked")
    assert failed <= idemtools_may_fail(), kit.out + kit.err
    assert kit.code == (1 if failed else 0), kit.out + kit.err


# What a server that ignores the key breaks first, in every era: it executes every retry.
BROKEN = {"sep-3182-capability-initialize", "sep-3182-duplicate-not-executed"}


@pytest.mark.parametrize("kind", ["highlevel", "lowlevel"])
def test_server_type_with_install_passes(tmp_path: Path, kind: str) -> None:
    kit = run_kit(tmp_path, "--", *server_command(kind))
    assert_idemtools_passes(kit)
    assert kit.report["summary"]["eras"] == ERAS
    assert "sep-3182-duplicate-not-executed" in kit.ids("pass")


@pytest.mark.parametrize("kind", ["highlevel", "lowlevel"])
def test_server_type_without_install_fails(tmp_path: Path, kind: str) -> None:
    kit = run_kit(tmp_path, "--era", LEGACY, "--", *server_command(kind, "--no-install"))
    assert kit.code == 1, kit.out + kit.err
    assert kit.ids("fail", "MUST") >= BROKEN, kit.out
    assert "not conformant" in kit.out
