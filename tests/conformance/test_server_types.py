"""Every server type idemtools supports on this mcp line passes the kit with `add_fixture_tools`
and `install()`; the same server without `install()` fails.

mcp 1.x: FastMCP and the low-level `Server`; mcp 2.x: MCPServer and the low-level `Server`.
Standalone FastMCP 4.x: tests/fastmcp/test_conformance.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .kit import ERAS, IDEMTOOLS_MAY_FAIL, LEGACY, Kit, run_kit, server_command

pytestmark = pytest.mark.slow


def assert_idemtools_passes(kit: Kit) -> None:
    """Every MUST check that ran passed (but what kit.IDEMTOOLS_MAY_FAIL allows): exit 0, or 1
    for exactly such a failure."""
    failed = kit.failures("MUST")
    assert failed <= IDEMTOOLS_MAY_FAIL, kit.out + kit.err
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
