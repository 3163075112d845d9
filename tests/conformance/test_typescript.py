"""Proof 4: a server on the official TypeScript SDK (npm `@modelcontextprotocol/sdk`) with the
fixture tools and no idempotency. The kit, which knows nothing of either SDK, must report the
capability missing and a keyed duplicate executed twice. The same server with a small SEP-3182
layer passes the full kit, and with the one JavaScript bug in it (`JSON.stringify` with a
replacer array, which filters nested members too) fails the argument checks.

node and npm are needed; without them the test is skipped, unless IDEMTOOLS_REQUIRE_SERVICES=1
(CI), where it fails: CI must not go green by skipping the one cross-language proof.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.services import REQUIRE_ENV, services_required

from .kit import HERE, LEGACY, run_kit

pytestmark = [pytest.mark.sdk_free, pytest.mark.slow]  # a TypeScript server, the SDK-free kit

TS = HERE / "ts_server"


def _need(message: str) -> None:
    if services_required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1: the TypeScript proof is required)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def node() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _need("node and npm are needed for the TypeScript-SDK proof; install Node.js >= 18")
    assert node is not None and npm is not None
    if not (TS / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=TS,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            _need(f"npm ci in {TS} failed: {done.stderr[-800:]}")
    return node


def test_typescript_server_without_idempotency_is_caught(tmp_path: Path, node: str) -> None:
    kit = run_kit(tmp_path, "--", node, str(TS / "server.mjs"))
    assert kit.code == 1, kit.out + kit.err
    assert kit.report["summary"]["eras"] == [LEGACY]
    capability = kit.check("sep-3182-capability-initialize")
    assert capability["status"] == "fail" and "missing" in capability["detail"]
    duplicate = kit.check("sep-3182-duplicate-not-executed")
    assert duplicate["status"] == "fail"
    assert "2 executions" in duplicate["detail"]
    # sep3182_throw on the TypeScript SDK: a JSON-RPC error with data, re-executed on retry.
    thrown = kit.check("sep-3182-error-replayed-jsonrpc")
    assert "executed again (2 executions)" in thrown["detail"]
    # ... reported once: blocked by the first check that saw every keyed retry run again.
    assert thrown["status"] == "blocked"
    assert thrown["blocked_by"] == "sep-3182-duplicate-not-executed"
    assert "sep-3182-error-replayed-jsonrpc" in kit.report["summary"]["unexpected_failures"]
    evidence = [e for e in thrown["evidence"] if '"sep3182_throw"' in e.get("request", "")]
    assert evidence[0]["answer"]["error"]["code"] == 1001
    assert evidence[0]["answer"]["error"]["data"]["executions"] == 1
    # The fixtures themselves work: unkeyed calls count as they should.
    assert kit.check("sep-3182-unkeyed-unaffected")["status"] == "pass"


def _with_idempotency(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    monkeypatch.setenv("SEP3182_TS_IDEMPOTENCY", mode)  # the server process inherits it


def test_typescript_server_with_idempotency_passes_the_full_kit(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_idempotency(monkeypatch, "correct")
    kit = run_kit(tmp_path, "--", node, str(TS / "server.mjs"))
    assert kit.code == 0, kit.out + kit.err
    assert kit.ids("fail") | kit.ids("blocked") == set(), kit.out
    large = kit.check("sep-3182-replay-large-outcome")
    assert large["status"] == "pass" and "1 MiB" in large["detail"]
    assert kit.check("sep-3182-concurrent-duplicates-one-execution")["status"] == "pass"


def test_typescript_replacer_array_is_caught(
    tmp_path: Path, node: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`JSON.stringify(args, Object.keys(args).sort())`: a common way to sort keys in
    JavaScript, whose replacer array also drops every nested member not named at the top."""
    _with_idempotency(monkeypatch, "replacer-array")
    kit = run_kit(tmp_path, "--family", "arguments", "--", node, str(TS / "server.mjs"))
    assert kit.code == 1, kit.out + kit.err
    nested = kit.check("sep-3182-conflict-nested-arguments")
    assert nested["status"] == "fail"
    assert "the original result was replayed" in nested["detail"]
