"""Over a real stdio subprocess: the README's demo plays every scenario and checks itself, and
a second run under the same home (the server's default store on stdio keeps records on disk)
prints the same. With no state directory chosen, the demo writes nothing under the home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_demo() -> str:
    env = {k: v for k, v in os.environ.items() if k != "IDEMTOOLS_STORE"}  # the default store
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_demo_over_stdio_behaves_as_the_sep_says() -> None:
    out = run_demo()
    # The first run left its records in the state directory the tests chose...
    assert list(Path(os.environ["XDG_STATE_HOME"]).glob("idemtools/payments-*.db"))
    # ...and the second run's server finds them there.
    assert out == run_demo()
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


@pytest.mark.slow
def test_demo_writes_nothing_under_the_home_when_no_state_directory_is_chosen(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("IDEMTOOLS_STORE", "XDG_STATE_HOME")}
    env["HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "in a temporary state directory, removed at the end" in done.stdout
    assert "All scenarios behaved as SEP-3182 says." in done.stdout
    assert not list(home.rglob("*")), list(home.rglob("*"))
