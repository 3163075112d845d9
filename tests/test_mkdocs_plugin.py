"""The mkdocs plugin: strict builds of the project site and of a user site, errors, serve.

Builds run in child processes (`python -m mkdocs build --strict`), the way CI and users run
them; the plugin's hooks are also driven in-process where a child process would hide them.
"""

from __future__ import annotations

import html
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures_docs.site import (
    PROJECT_SERVER,
    ROOT,
    describe_json,
    mkdocs_build,
    require_mkdocs,
    user_site,
)


def _text(page: Path) -> str:
    """The page's visible text, roughly: tags dropped, entities decoded, spaces collapsed."""
    raw = page.read_text(encoding="utf-8")
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def _assert_rows(page: Path, described: dict[str, Any]) -> None:
    text = _text(page)
    tools = described["tools"]
    assert tools, "the documented server lists no tools"
    for tool in tools:
        seconds = tool["retention_seconds"]
        shown = str(int(seconds)) if float(seconds).is_integer() else str(seconds)
        source = "" if tool["policy"] == "own" else f" ({tool['policy']})"
        row = f"{tool['name']}{source} {tool['retention']} ({shown} s)"
        assert row in text, f"row for {tool['name']!r} not found in {page}"


@pytest.mark.once  # the project's own site (mkdocstrings and all): CI builds it on 3.13
def test_project_site_builds_strictly(tmp_path: Path) -> None:
    require_mkdocs("material", "mkdocstrings", "mkdocstrings_handlers.python")
    assert PROJECT_SERVER in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    done = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    page = tmp_path / "site" / "retention" / "index.html"
    _assert_rows(page, describe_json(PROJECT_SERVER, ROOT))
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    assert 'id="idemtools.install"' in reference  # mkdocstrings rendered the docstrings
    assert 'id="idemtools.client.call_tool"' in reference  # the client helper is documented
    assert 'class="mermaid"' in (tmp_path / "site" / "how-it-works" / "index.html").read_text()


def test_user_site_builds_strictly(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    page = tmp_path / "site" / "retention" / "index.html"
    _assert_rows(page, describe_json("userapp.server:server", tmp_path))
    text = _text(page)
    assert "Idempotency and retention" in text and "36 hours" in text  # title, server default
    assert not (tmp_path / "docs" / "retention.md").exists()  # virtual: nothing written


def test_several_servers_and_custom_page(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    (tmp_path / "userapp" / "other.py").write_text(
        (tmp_path / "userapp" / "server.py").read_text().replace("fixture-payments", "second")
    )
    text = config.read_text().replace("retention.md", "api/idempotency.md")
    text = text.replace(
        "servers: [userapp.server:server]",
        "servers: [userapp.server:server, userapp.other:server]\n"
        "      title: Retry safety\n"
        "      page: api/idempotency.md",
    )
    config.write_text(text)
    (tmp_path / "docs" / "index.md").write_text("# Home\n")
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    page = _text(tmp_path / "site" / "api" / "idempotency" / "index.html")
    assert "Retry safety" in page
    assert "retention: fixture-payments" in page and "retention: second" in page


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ("[userapp.server]", "'userapp.server' is not a server reference"),
        ("[nowhere_xyz.server:server]", "cannot import 'nowhere_xyz.server'"),
        ("[userapp.server:missing]", "module 'userapp.server' has no attribute 'missing'"),
        ("[userapp.server:plain]", "userapp.server:plain ("),  # + "does not have idemtools"
        ("[]", "'servers' is empty"),
    ],
)
def test_misconfiguration_stops_the_build(tmp_path: Path, servers: str, message: str) -> None:
    require_mkdocs()
    config = user_site(tmp_path, servers=servers)
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "idemtools plugin:" in output and message in output, output
    if servers == "[userapp.server:plain]":
        assert "does not have idemtools installed" in output
    assert "Traceback" not in output


def test_import_error_in_server_module_stops_the_build(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    (tmp_path / "userapp" / "server.py").write_text("import sqlite3\nraise OSError('no db')\n")
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "cannot import 'userapp.server': OSError: no db" in done.stdout + done.stderr


def test_existing_page_file_is_refused(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    (tmp_path / "docs" / "retention.md").write_text("# hand-written, soon stale\n")
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "docs/retention.md exists" in done.stdout + done.stderr


def test_page_outside_docs_is_refused(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    config.write_text(config.read_text() + "      page: ../escape.md\n")
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "must be a relative path ending in '.md'" in done.stdout + done.stderr


# -- in-process: fresh imports across builds, and what `mkdocs serve` watches -----------------


class _FakeLiveReload:
    def __init__(self) -> None:
        self.watched: list[tuple[str, bool]] = []

    def watch(self, path: str, func: None = None, *, recursive: bool = True) -> None:
        self.watched.append((path, recursive))


def test_rebuild_reimports_and_serve_watches(tmp_path: Path) -> None:
    require_mkdocs()
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config_file = user_site(tmp_path, package="inproc_app")
    module = tmp_path / "inproc_app" / "server.py"

    def build_once() -> Any:
        config = load_config(config_file=str(config_file), site_dir=str(tmp_path / "site"))
        build(config)
        return config

    try:
        config = build_once()
        page = tmp_path / "site" / "retention" / "index.html"
        assert "7 days" in _text(page)
        fake = _FakeLiveReload()
        config.plugins.on_serve(fake, config=config, builder=lambda: None)
        # The package's Python files, each by path; never the directory (see the test below).
        assert fake.watched == [
            (str(module.parent / "__init__.py"), False),
            (str(module), False),
        ]
        module.write_text(module.read_text().replace("days=7", "days=9"))
        build_once()  # mkdocs serve rebuilds in the same process: must see the edit
        assert "9 days" in _text(page) and "7 days" not in _text(page)
    finally:
        for name in [m for m in sys.modules if m.startswith("inproc_app")]:
            del sys.modules[name]
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
            return body.decode("utf-8")
    except OSError:
        return ""


def _wait_for(url: str, needle: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if needle in _fetch(url):
            return True
        time.sleep(0.3)
    return False


@pytest.mark.slow
def test_mkdocs_serve_refreshes_when_the_server_module_changes(tmp_path: Path) -> None:
    require_mkdocs()
    config = user_site(tmp_path)
    port = _free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "mkdocs", "serve", "-f", str(config), "-a", f"127.0.0.1:{port}"],
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/retention/"
    try:
        assert _wait_for(url, "7 days", time.monotonic() + 60), "mkdocs serve never served it"
        module = tmp_path / "userapp" / "server.py"
        module.write_text(module.read_text().replace("days=7", "days=9"))
        assert _wait_for(url, "9 days", time.monotonic() + 30), "page not rebuilt after edit"
    finally:
        serve.terminate()
        try:
            _, err = serve.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            serve.kill()
            _, err = serve.communicate()
    assert "Watching paths for changes" in err and "userapp" in err


def test_serve_rebuilds_on_a_source_edit_but_not_on_a_store_or_log_write(tmp_path: Path) -> None:
    """A server run from the project writes its SQLite store and logs beside its module:
    mkdocs serve's real watcher must not rebuild on those writes, and must on a source edit
    (an editor's atomic save: a new file renamed over the module)."""
    require_mkdocs()
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.livereload import LiveReloadServer

    config_file = user_site(tmp_path, package="watched_app")
    module = tmp_path / "watched_app" / "server.py"
    try:
        config = load_config(config_file=str(config_file), site_dir=str(tmp_path / "site"))
        build(config)
        server = LiveReloadServer(lambda: None, "127.0.0.1", 0, str(tmp_path / "site"))
        config.plugins.on_serve(server, config=config, builder=lambda: None)
        server.observer.start()
        try:

            def rebuild_wanted(within: float) -> bool:
                deadline = time.monotonic() + within
                while time.monotonic() < deadline:  # bounded: at most `within` seconds
                    if server._want_rebuild:
                        return True
                    time.sleep(0.05)
                return False

            time.sleep(0.3)  # the observer's watches are in place
            for name in ("payments.db", "payments.db-wal", "payments.db-journal", "server.log"):
                (module.parent / name).write_bytes(b"written by a running server")
            with (module.parent / "payments.db").open("ab") as db:
                db.write(b"another page")
            assert not rebuild_wanted(1.0), "a store or log write rebuilt the site"
            staged = module.with_suffix(".py.tmp")
            staged.write_text(module.read_text().replace("days=7", "days=8"))
            os.replace(staged, module)
            assert rebuild_wanted(5.0), "an edit of the server module did not rebuild"
        finally:
            server.observer.stop()
            server.observer.join(timeout=5)
    finally:
        for name in [m for m in sys.modules if m.startswith("watched_app")]:
            del sys.modules[name]
        sys.path[:] = [p for p in sys.path if p != str(tmp_path)]
