"""A downstream project type-checks against an editable install.

setuptools' default editable install for a flat layout is an import hook (a
``__editable___*_finder.py``), which mypy cannot follow: downstream ``mypy --strict`` reported
``import-not-found`` for idemtools. ``package-dir = {"" = "."}`` in pyproject.toml makes it a
plain path ``.pth``. These tests run where idemtools is installed editable (the README's test
command); elsewhere (a wheel) they skip and say so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import idemtools

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parents[1]


def _installed() -> metadata.Distribution | None:
    # The installed one (it has direct_url.json), not a build's idemtools.egg-info in the checkout,
    # which the current directory on sys.path may put first.
    for dist in metadata.distributions(name="idemtools"):
        if dist.read_text("direct_url.json"):
            return dist
    return None


def _editable_url() -> str | None:
    dist = _installed()
    if dist is None:
        return None
    text = dist.read_text("direct_url.json") or ""
    info = json.loads(text)
    if not info.get("dir_info", {}).get("editable"):
        return None
    url: str = info["url"]
    return url


def _require_editable() -> None:
    if _editable_url() is None:
        pytest.skip("idemtools is not installed editable here (pip install -e): nothing to check")


def test_the_editable_install_is_a_path_pth_not_an_import_hook() -> None:
    _require_editable()
    dist = _installed()
    assert dist is not None
    site = Path(str(dist.locate_file("")))
    hooks = list(site.glob("__editable___idemtools*finder.py"))
    assert not hooks, "an import hook: mypy cannot follow it"
    entries = [
        line.strip()
        for pth in site.glob("__editable__*idemtools*.pth")
        for line in pth.read_text().splitlines()
        if line.strip()
    ]
    assert entries, "no .pth for idemtools"
    assert all(not e.startswith("import ") for e in entries), entries
    assert Path(idemtools.__file__).resolve().parent.parent in {Path(e).resolve() for e in entries}


def _mypy(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--python-executable",
            sys.executable,
            "app.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_downstream_project_type_checks_against_the_editable_install(tmp_path: Path) -> None:
    _require_editable()
    good = tmp_path / "good"
    good.mkdir()
    (good / "app.py").write_text(
        textwrap.dedent(
            """
            from datetime import timedelta

            from idemtools import idempotent


            @idempotent(retention=timedelta(hours=1))
            async def charge(amount: int) -> str:
                return str(amount)
            """
        )
    )
    done = _mypy(good)
    assert done.returncode == 0, done.stdout + done.stderr

    # The same check must see idemtools' real types (not Any): a wrong use is reported.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "app.py").write_text("from idemtools import Policy\n\nx: int = Policy\n")
    done = _mypy(bad)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Incompatible types in assignment" in done.stdout, done.stdout
    assert "import-not-found" not in done.stdout, done.stdout
