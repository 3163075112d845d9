"""Proof: the kit against servers the operator did not write, which have no fixture tools.

A plain Python-SDK server and the reference `everything` server from npm (pinned in
`everything/package-lock.json`), each direct and behind `idemtools proxy` (stdio). The kit runs
every check that needs no fixture (the capability in both eras, a malformed key, the shape of
error objects, replay equality on the tool named with `--tool`), reports the rest BLOCKED with
what would run them, and exits 0 with the run marked incomplete (1 under `--require-all`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.services import REQUIRE_ENV, services_required

from .kit import ERAS, HERE, LEGACY, PY, Kit, run_kit, server_command

pytestmark = pytest.mark.slow

EVERYTHING = HERE / "everything"
FIXTURE_FREE = {
    "sep-3182-capability-initialize",
    "sep-3182-tool-replay-returns-original",
    "sep-3182-tool-replay-json-equal",
    "sep-3182-malformed-key-refused",
    "mcp-base-error-object",
}
NOT_ON_STDIO = {
    "sep-3182-scope-per-caller",
    "sep-3182-scope-across-connections",
    "sep-3182-shared-store",
}


def proxy() -> list[str]:
    return [PY, "-m", "idemtools.cli", "proxy", "--"]


def assert_incomplete(kit: Kit, eras: list[str]) -> None:
    """Everything that could run passed; everything that needs a fixture is blocked, saying
    how to add one in Python and in TypeScript; the run is incomplete, not failed."""
    assert kit.code == 0, kit.out + kit.err
    assert kit.report["summary"]["eras"] == eras
    assert kit.ids("fail") == set(), kit.out
    assert kit.ids("pass") >= FIXTURE_FREE, kit.out
    assert kit.ids("skip") == NOT_ON_STDIO, kit.out
    for check in kit.report["checks"]:
        if check["status"] == "blocked":
            assert "blocked_by" not in check
            assert "add_fixture_tools" in check["enable"] and "TypeScript" in check["enable"]
    summary = kit.report["summary"]
    assert summary["incomplete"] is True and summary["skipped_must"]
    assert not set(summary["skipped_must"]) & NOT_ON_STDIO  # only what the transport allows
    assert kit.out.splitlines()[-1].startswith("incomplete:")


def test_a_plain_python_server_is_judged_on_what_needs_no_fixture(tmp_path: Path) -> None:
    """Direct, with no idemtools: the capability is missing, a real MUST failure; nothing
    else is invented, and the rest is blocked, not failed."""
    kit = run_kit(tmp_path, "--era", LEGACY, "--", *server_command("plain"))
    assert kit.code == 1, kit.out + kit.err
    assert kit.ids("fail") <= {"sep-3182-capability-initialize"}, kit.out
    assert kit.check("sep-3182-capability-initialize")["status"] == "fail"
    # The failure says what was sent, what came back and the sentence it breaks.
    lines = kit.out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("FAIL "))
    assert lines[at + 1].startswith("    sent: initialize")
    assert lines[at + 2].startswith("    got:  ") and '"capabilities"' in lines[at + 2]
    assert lines[at + 3] == "    rule: " + kit.check("sep-3182-capability-initialize")["text"]
    assert kit.check("sep-3182-duplicate-not-executed")["status"] == "blocked"
    assert "--tool NAME" in kit.check("sep-3182-tool-replay-returns-original")["enable"]


def test_a_plain_python_server_behind_the_proxy_passes_incomplete(tmp_path: Path) -> None:
    tool = ("--tool", "echo", "--arguments", '{"text": "hi"}')
    kit = run_kit(tmp_path, *tool, "--", *proxy(), *server_command("plain"))
    assert_incomplete(kit, ERAS)
    strict = run_kit(
        tmp_path,
        "--era",
        LEGACY,
        "--require-all",
        *tool,
        "--",
        *server_command("plain", "--install"),
    )
    assert strict.code == 1 and strict.ids("fail") == set(), strict.out
    assert strict.out.splitlines()[-1] == "not conformant"


def test_a_fixture_that_breaks_the_contract_exits_2_not_1(tmp_path: Path) -> None:
    kit = run_kit(
        tmp_path, "--era", LEGACY, "--", *server_command("plain", "--install", "--broken-fixtures")
    )
    assert kit.code == 2, kit.out + kit.err
    assert kit.ids("fail") == set(), kit.out
    errors = kit.ids("fixture-error")
    assert "sep-3182-duplicate-not-executed" in errors
    detail = kit.check("sep-3182-duplicate-not-executed")["detail"]
    assert "sep3182_record" in detail and "the contract:" in detail
    assert kit.report["summary"]["exit_code"] == 2
    assert "FIXTURE-ERROR" in kit.out


@pytest.fixture(scope="module")
def everything() -> list[str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        message = "node and npm are needed for the third-party server proof"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    assert node is not None and npm is not None
    entry = EVERYTHING / "node_modules/@modelcontextprotocol/server-everything/dist/index.js"
    if not entry.is_file():
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=EVERYTHING,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            message = f"npm ci in {EVERYTHING} failed: {done.stderr[-800:]}"
            if services_required():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    return [node, str(entry), "stdio"]


ECHO = ("--tool", "echo", "--arguments", '{"message": "hi"}')


def test_the_everything_server_direct(tmp_path: Path, everything: list[str]) -> None:
    kit = run_kit(tmp_path, *ECHO, "--", *everything)
    assert kit.code == 1, kit.out + kit.err
    # It does not implement the SEP: no capability, and a malformed key runs the tool (SHOULD).
    assert kit.ids("fail", "MUST") == {"sep-3182-capability-initialize"}, kit.out
    assert kit.check("sep-3182-malformed-key-refused")["status"] == "fail"
    assert kit.check("sep-3182-duplicate-not-executed")["status"] == "blocked"


def test_the_everything_server_behind_the_proxy(tmp_path: Path, everything: list[str]) -> None:
    kit = run_kit(tmp_path, *ECHO, "--", *proxy(), *everything)
    assert_incomplete(kit, [LEGACY])
