"""The `idemtools` command line: output, exit codes (0 / 1 load error / 2 usage), messages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from idemtools.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = "tests.fixtures_docs.server:server"
GOLDEN = ROOT / "tests" / "golden"
_RUN_MAIN = "import sys; from idemtools.cli import main; sys.exit(main())"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The CLI in a child process, as a shell user runs it (real exit code, real stderr)."""
    # SDK import-time warnings (mcp 1.21's pydantic-settings) are not the CLI's output.
    env = {**os.environ, "PYTHONPATH": "", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "idemtools.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_markdown_to_stdout_matches_golden() -> None:
    done = _run("docs", FIXTURE)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (GOLDEN / "fixture_server.md").read_text(encoding="utf-8")


def test_output_file_and_json(tmp_path: Path) -> None:
    out = tmp_path / "retention.json"
    done = _run("docs", FIXTURE, "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    data = json.loads(out.read_text(encoding="utf-8"))
    assert [t["name"] for t in data["tools"]] == ["charge", "ping", "send_email"]


def test_bad_spec_is_a_usage_error() -> None:
    done = _run("docs", "tests.fixtures_docs.server")
    assert done.returncode == 2
    assert "not a server reference" in done.stderr and "usage:" in done.stderr


def test_import_error_exits_1_with_one_line() -> None:
    done = _run("docs", "no_such_module_xyz:server")
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no traceback
    assert lines[0].startswith("idemtools: error: cannot import 'no_such_module_xyz'")


def test_server_without_idemtools_exits_1() -> None:
    done = _run("docs", "tests.fixtures_docs.server:plain")
    assert done.returncode == 1
    assert "does not have idemtools installed" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_missing_attribute_exits_1() -> None:
    done = _run("docs", "tests.fixtures_docs.server:nope")
    assert done.returncode == 1
    assert "has no attribute 'nope'" in done.stderr


def test_current_directory_is_importable(tmp_path: Path) -> None:
    """As with `python -m`: a user runs `idemtools docs app:server` from the project root."""
    shutil.copy(ROOT / "tests" / "fixtures_docs" / "server.py", tmp_path / "cwd_app.py")
    # -I: like a console script, the interpreter itself puts no directory on sys.path.
    done = subprocess.run(
        [sys.executable, "-I", "-c", _RUN_MAIN, "docs", "cwd_app:server"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '<code style="white-space: nowrap">send_email</code>' in done.stdout


def test_unwritable_output_exits_1(tmp_path: Path) -> None:
    done = _run("docs", FIXTURE, "-o", str(tmp_path / "missing-dir" / "x.md"))
    assert done.returncode == 1
    assert "cannot write" in done.stderr


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("idemtools ")


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_unknown_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["docs", FIXTURE, "--format", "yaml"])
    assert exit_.value.code == 2


def test_console_script() -> None:
    """The installed `idemtools` entry point (pyproject `[project.scripts]`)."""
    script = Path(sys.executable).with_name("idemtools")
    if not script.exists():
        if os.environ.get("IDEMTOOLS_REQUIRE_SERVICES") == "1":
            pytest.fail(f"no console script at {script}: pip install -e . to register it")
        pytest.skip(f"no console script at {script} (package not installed)")
    done = subprocess.run(
        [str(script), "docs", FIXTURE, "--format", "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["server"] == "fixture-payments"
    bad = subprocess.run([str(script), "docs", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
