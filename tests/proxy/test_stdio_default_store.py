"""`idemtools proxy` on stdio without `--store` keeps its records across its own processes.

A host that starts the proxy anew for a retry (a session per call, a restart) must still get the
first attempt's answer: the default store on stdio is a SQLite file per upstream entry point in
the user's state directory (tests/conftest.py points `XDG_STATE_HOME` at a temporary one).
Each test runs with `--store memory://` too, for the comparison: there the retry runs again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from idemtools.stores import SQLiteStore
from idemtools.stores.default import proxy_default_store, proxy_entry_point

from .helpers import Session, executions, proxy_argv, upstream_argv


@pytest.mark.parametrize(("options", "expected"), [(("--store", "memory://"), 2), ((), 1)])
def test_a_fresh_proxy_per_attempt_runs_the_tool_once(
    tmp_path: Path, options: tuple[str, ...], expected: int
) -> None:
    log = tmp_path / "log"
    answers = []
    for _ in range(2):  # the first answer is lost to the host; the retry is a new process
        with Session(proxy_argv(*options, upstream=upstream_argv(log))) as s:
            s.initialize()
            answers.append(s.call(1, "record", "k-1", label="a")["result"])
            assert s.close() == 0
    assert executions(log, "a") == expected
    if expected == 1:
        assert answers[1] == answers[0]


def test_each_upstream_command_has_its_own_file() -> None:
    one = proxy_default_store(["python3", "a.py"])
    two = proxy_default_store(["python3", "b.py"])
    assert isinstance(one, SQLiteStore) and isinstance(two, SQLiteStore)
    assert one.path != two.path and Path(one.path).parent == Path(two.path).parent
    assert proxy_default_store(["python3", "a.py"]).path == one.path  # type: ignore[attr-defined]


def test_the_file_is_keyed_on_the_upstream_s_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`node dist/index.js` in two projects is two servers: an argument that names a file is
    made absolute against the working directory the upstream inherits; the same command in the
    same place is one file, and a command that names no file is one server wherever it runs."""
    projects = [tmp_path / "one", tmp_path / "two"]
    for project in projects:
        (project / "dist").mkdir(parents=True)
        (project / "dist" / "index.js").write_text("// the server\n")

    def path_of(command: list[str]) -> str:
        store = proxy_default_store(command)
        assert isinstance(store, SQLiteStore)
        return store.path

    paths = {}
    for project in projects:
        monkeypatch.chdir(project)
        paths[project.name] = (
            path_of(["python3", "dist/index.js"]),
            path_of(["python3", "--entry=dist/index.js"]),
            path_of(["python3", "-m", "server", "--port", "1"]),
        )
        assert path_of(["python3", "dist/index.js"]) == paths[project.name][0]
    one, two = paths["one"], paths["two"]
    assert one[0] != two[0] and one[1] != two[1]
    assert one[2] == two[2]  # names no file: one server
    assert one[2] != path_of(["python3", "-m", "server", "--port", "2"])
    assert proxy_entry_point(["python3", "dist/index.js"]).endswith(
        f" {projects[1] / 'dist' / 'index.js'}"
    )


def test_a_program_reached_through_a_link_is_not_followed(tmp_path: Path) -> None:
    """Two virtual environments' `bin/python` link to one interpreter: `python -m server` in
    each is its own server, with its own file."""
    links = []
    for name in ("one", "two"):
        link = tmp_path / name / "bin" / "python"
        link.parent.mkdir(parents=True)
        link.symlink_to(sys.executable)
        links.append(str(link))
    one = proxy_default_store([links[0], "-m", "server"])
    two = proxy_default_store([links[1], "-m", "server"])
    assert isinstance(one, SQLiteStore) and isinstance(two, SQLiteStore)
    assert one.path != two.path
