"""A downstream project running `mypy --strict` sees the signatures `@idempotent` decorates.

`typing_samples/good.py` must type-check cleanly; `typing_samples/bad.py` must get exactly the
errors its `# expect: <code>` comments announce, on those lines (an `Any`-typed decorator would
pass good.py but miss them).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = Path(__file__).resolve().parent / "typing_samples"

pytestmark = pytest.mark.slow  # mypy with a cold cache: 4 to 11 s measured


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mypy-cache")


def run_mypy(sample: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            # Report only the sample's own errors, as for an installed dependency downstream.
            "--follow-imports=silent",
            "--cache-dir",
            str(cache_dir),
            "--show-error-codes",
            "--no-pretty",
            "--no-error-summary",
            str(sample.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_good_sample_passes_strict(cache_dir: Path) -> None:
    result = run_mypy(SAMPLES / "good.py", cache_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_bad_sample_reports_each_misuse(cache_dir: Path) -> None:
    sample = SAMPLES / "bad.py"
    expected = {
        (number, m.group(1))
        for number, line in enumerate(sample.read_text().splitlines(), start=1)
        if (m := re.search(r"# expect: ([a-z-]+)\s*$", line))
    }
    assert ("arg-type" in {code for _, code in expected}) and len(expected) >= 2

    result = run_mypy(sample, cache_dir)
    assert result.returncode == 1, result.stdout + result.stderr
    reported = {
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"^[^:\n]*bad\.py:(\d+): error: .*\[([a-z-]+)\]$", result.stdout, re.M)
    }
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert reported == expected, result.stdout
    assert len(errors) == len(expected), result.stdout
