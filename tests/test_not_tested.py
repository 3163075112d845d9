"""A run that skips tests for a missing framework says so loudly.

The README's test command installs no fastmcp, and `tests/fastmcp` skips without it: the
summary must then name what was not tested and how to install it, not look plainly green.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pytest(args: list[str], pythonpath: Path | None = None) -> str:
    env = None
    if pythonpath is not None:
        import os

        env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    return done.stdout + done.stderr


@pytest.mark.slow
def test_skipping_tests_fastmcp_for_a_missing_fastmcp_is_loud(tmp_path: Path) -> None:
    # Hide fastmcp from the child interpreter (a package of that name that cannot be imported,
    # ahead of site-packages), so the test holds whether or not fastmcp is installed here.
    (tmp_path / "fastmcp").mkdir()
    (tmp_path / "fastmcp" / "__init__.py").write_text(
        "raise ModuleNotFoundError('hidden by the test', name='fastmcp')\n"
    )
    out = _pytest(["tests/fastmcp/test_memory.py", "tests/fastmcp/test_testing.py"], tmp_path)
    assert "NOT TESTED (a framework is not installed)" in out, out
    line = next(x for x in out.splitlines() if x.startswith("NOT TESTED: tests/fastmcp"))
    assert "in 2 modules" in line and "fastmcp 4.x is not installed" in line, line
    assert "install with: .venv/bin/pip install -e '.[fastmcp]'" in out, out


@pytest.mark.slow
def test_a_run_that_skipped_nothing_for_a_framework_says_nothing() -> None:
    out = _pytest(["tests/test_canonical.py", "-k", "test_scalars_equal_rfc8785"])
    assert "passed" in out, out
    assert "NOT TESTED" not in out, out


def test_the_section_counts_tests_and_names_each_extra() -> None:
    from tests.conftest import not_tested

    skipped = pytest.TestReport(
        "tests/test_docs_clients.py::test_example[agents]",
        ("tests/test_docs_clients.py", 1, "test_example"),
        {},
        "skipped",
        ("tests/test_docs_clients.py", 42, "Skipped: agents is not installed"),
        "call",
    )
    elsewhere = pytest.TestReport(
        "tests/test_x.py::test_y",
        ("tests/test_x.py", 1, "test_y"),
        {},
        "skipped",
        ("tests/test_x.py", 3, "Skipped: set IDEMTOOLS_REDIS_URL"),
        "call",
    )
    lines = not_tested([skipped, skipped, elsewhere])
    assert lines == [
        "NOT TESTED: tests/test_docs_clients.py (2 tests): agents is not installed",
        "    install with: .venv/bin/pip install -e '.[openai-agents]'  "
        "(the OpenAI Agents SDK integration)",
    ]
