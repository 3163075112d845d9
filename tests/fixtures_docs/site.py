"""Helpers for the mkdocs and browser tests: build a site in a child process, find what it shows."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT_SERVER = "examples.payments_server:server"
"""The server the project's own mkdocs.yml documents."""
FIXTURE_SOURCE = Path(__file__).with_name("server.py")


def require(condition: bool, reason: str) -> None:
    """Skip with `reason`, or fail when IDEMTOOLS_REQUIRE_SERVICES=1 (as in CI)."""
    if condition:
        return
    if os.environ.get("IDEMTOOLS_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason} (IDEMTOOLS_REQUIRE_SERVICES=1)")
    pytest.skip(reason)


def require_mkdocs(*extra_modules: str) -> None:
    """mkdocs (and the theme/plugins a site uses) importable, and our plugin registered."""
    for name in ("mkdocs", *extra_modules):
        try:
            __import__(name)
        except ImportError:
            require(False, f"{name} is not installed: pip install -e '.[docs]'")
    registered = {ep.name for ep in entry_points(group="mkdocs.plugins")}
    if "idemtools" not in registered:
        pytest.fail(
            "the 'idemtools' mkdocs plugin entry point is not registered: add "
            '[project.entry-points."mkdocs.plugins"] idemtools = '
            '"idemtools.docs.mkdocs_plugin:IdemtoolsPlugin" and pip install -e .'
        )


def mkdocs_build(config: Path, site_dir: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` in a child process, from the config's directory."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": ""}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
    return subprocess.run(
        [*command, "-d", str(site_dir)],
        cwd=config.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def describe_json(spec: str, cwd: Path) -> dict[str, object]:
    """The CLI's JSON for a server, from a child process (keeps its registry out of ours)."""
    done = subprocess.run(
        [sys.executable, "-m", "idemtools.cli", "docs", spec, "--format", "json"],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


def user_site(root: Path, *, package: str = "userapp", servers: str | None = None) -> Path:
    """A minimal user project: a package holding a copy of the fixture server, and mkdocs.yml."""
    (root / package).mkdir(parents=True)
    (root / package / "__init__.py").write_text("")
    shutil.copy(FIXTURE_SOURCE, root / package / "server.py")
    (root / "docs").mkdir()
    (root / "docs" / "index.md").write_text("# My server\n\nSee [retention](retention.md).\n")
    listed = servers if servers is not None else f"[{package}.server:server]"
    config = root / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(
            f"""\
            site_name: My server
            nav:
              - Home: index.md
              - Retention: retention.md
            plugins:
              - idemtools:
                  servers: {listed}
            """
        )
    )
    return config


_BUILT: dict[Path, Path] = {}


def project_site() -> Path:
    """The project's own site, built once per test process (`mkdocs build --strict` is slow).

    The directory is removed when the process exits; callers must not write into it.
    """
    if ROOT in _BUILT:
        return _BUILT[ROOT]
    require_mkdocs("material", "mkdocstrings")
    import atexit
    import tempfile

    site = Path(tempfile.mkdtemp(prefix="idemtools-site-")) / "site"
    atexit.register(shutil.rmtree, site.parent, True)
    done = mkdocs_build(ROOT / "mkdocs.yml", site)
    assert done.returncode == 0, done.stderr
    _BUILT[ROOT] = site
    return site
