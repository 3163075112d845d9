"""Proof: servers without idemtools pass `idemtools conformance` behind `idemtools proxy`.

The TypeScript-SDK fixture server (tests/conformance/ts_server, which the kit fails on its
own: tests/conformance/test_typescript.py) and a low-level mcp-SDK server with the fixture
tools and idemtools never installed (`servers.py lowlevel --no-install`), both over stdio. The
TypeScript SDK 1.x serves only the 2025-11-25 era; the 2026-07-28 proof runs on the Python
upstream (mcp 2.x).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.kit import ERAS, LEGACY, PY, Kit, run_kit, server_command
from tests.conformance.test_typescript import TS, node  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow

STDIO_ONLY = {"sep-3182-scope-per-caller", "sep-3182-scope-across-connections"}
NEEDS_ALSO = {"sep-3182-shared-store"}
RETENTION = {"sep-3182-retention-window", "sep-3182-retention-window-every-outcome"}


def proxy(*options: str) -> list[str]:
    return [PY, "-m", "idemtools.cli", "proxy", *options, "--"]


def assert_passes(kit: Kit, eras: list[str], not_run: set[str]) -> None:
    assert kit.ids("fail") | kit.ids("blocked") == set(), kit.out + kit.err
    assert kit.code == 0, kit.out + kit.err
    assert kit.report["summary"]["eras"] == eras
    assert kit.ids("skip") == not_run, kit.out
    assert kit.check("sep-3182-capability-initialize")["status"] == "pass"
    assert kit.check("sep-3182-duplicate-not-executed")["status"] == "pass"


def test_typescript_server_passes_behind_the_proxy(tmp_path: Path, node: str) -> None:  # noqa: F811
    kit = run_kit(tmp_path, "--", *proxy(), node, str(TS / "server.mjs"))
    assert_passes(kit, [LEGACY], STDIO_ONLY | NEEDS_ALSO | RETENTION)
    # The TypeScript server's own JSON-RPC error (code 1001, with data) is recorded and replayed.
    assert kit.check("sep-3182-error-replayed-jsonrpc")["status"] == "pass"


def test_python_sdk_server_without_idemtools_passes_behind_the_proxy(tmp_path: Path) -> None:
    upstream = server_command("lowlevel", "--no-install")
    kit = run_kit(tmp_path, "--retention", "2", "--", *proxy("--retention", "3"), *upstream)
    assert_passes(kit, ERAS, STDIO_ONLY | NEEDS_ALSO)
    for era in ERAS:
        assert kit.check("sep-3182-retention-window", era)["status"] == "pass"
