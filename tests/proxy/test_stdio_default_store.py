"""`idemtools proxy` on stdio without `--store` keeps its records across its own processes.

A host that starts the proxy anew for a retry (a session per call, a restart) must still get the
first attempt's answer: the default store on stdio is a SQLite file per upstream command in the
user's state directory (tests/conftest.py points `XDG_STATE_HOME` at a temporary one).
`--store memory://` is the old default, the "before".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from idemtools.stores import SQLiteStore
from idemtools.stores.default import proxy_default_store

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
