"""Over a real stdio subprocess: the README's demo plays every scenario and checks itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_over_stdio_behaves_as_the_sep_says() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "All scenarios behaved as SEP-3182 says." in out
    assert "FAIL" not in out
    for scenario in (
        "charged twice",
        "one execution",
        "conflict refused",
        "7.0 replayed 7",
        "in_progress at once",
        "isError replayed",
        "unkeyed call ran",
    ):
        assert scenario in out, scenario
