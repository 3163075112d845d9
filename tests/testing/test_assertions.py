"""idemtools.testing: the one-call check that a server is protected, and its pytest fixture.

Forgetting `install()` is silent (the server serves, keyed retries run twice); users'
own suites catch it with `assert_protected`. Shown here on both a protected server and one that
forgot `install()`, on the installed mcp line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import idemtools
from idemtools.testing import NotProtectedError, Protection, assert_protected, connect
from tests.e2e.harness import _Server, lowlevel_of, make_app  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parents[2]


def unprotected() -> tuple[Any, list[int]]:
    """A server whose author forgot `install()`: it serves, and runs every retry again."""
    server = _Server("forgot-install")
    runs: list[int] = []

    @server.tool()
    @idemtools.idempotent(registry=idemtools.Registry())
    def charge(amount: int) -> str:
        runs.append(amount)
        return f"charged {amount} #{len(runs)}"

    return server, runs


async def test_protected_server_passes_and_the_tool_ran_once() -> None:
    app = make_app()
    seen = await assert_protected(app.server, "charge", {"amount": 5})
    assert isinstance(seen, Protection)
    assert app.count("charge") == 1
    assert seen.first.content[0].text == seen.retry.content[0].text == "charged 5 usd #1"
    assert seen.key.startswith("idemtools-testing-")


async def test_protected_low_level_server_passes() -> None:
    app = make_app()
    await assert_protected(lowlevel_of(app.server), "plain", {"x": 1}, key="k-low")
    assert app.count("plain") == 1


async def test_forgotten_install_fails_with_the_fix_and_runs_nothing() -> None:
    server, runs = unprotected()
    with pytest.raises(NotProtectedError) as caught:
        await assert_protected(server, "charge", {"amount": 5})
    message = str(caught.value)
    assert "does not advertise capabilities.tools.idempotency" in message
    assert "keyed retries run twice" in message
    assert "idemtools.install(server)" in message
    assert isinstance(caught.value, AssertionError)  # a failed check, not a crash
    assert runs == []  # refused before any call was sent

    async with connect(server) as session:  # and it really is unprotected
        from idemtools.client import NO_RETRY, call_tool

        for _ in range(2):
            await call_tool(
                session,
                "charge",
                {"amount": 5},
                idempotency_key="k",
                retry=NO_RETRY,
                require_capability=False,
            )
    assert runs == [5, 5]


async def test_a_tool_the_server_does_not_list_is_not_protected() -> None:
    app = make_app()
    with pytest.raises(
        NotProtectedError, match=r"not replayed: the tool ran 2 time\(s\), 0 replay"
    ):
        await assert_protected(app.server, "no_such_tool", {})


async def test_a_refused_call_fails_naming_the_refusal() -> None:
    app = make_app()
    await assert_protected(app.server, "charge", {"amount": 1}, key="k-used")
    with pytest.raises(NotProtectedError, match="idempotency_key_conflict"):
        await assert_protected(app.server, "charge", {"amount": 2}, key="k-used")
    assert app.count("charge") == 1


FIXTURE_TESTS = """
import idemtools

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:
    from mcp.server.fastmcp import FastMCP as Server


def build(protect):
    server = Server("s")

    @server.tool()
    def charge(amount: int) -> str:
        return f"charged {amount}"

    if protect:
        idemtools.install(server)
    return server


async def test_protected(assert_protected):
    await assert_protected(build(True), "charge", {"amount": 1})


async def test_forgot_install(assert_protected):
    await assert_protected(build(False), "charge", {"amount": 1})
"""


def test_pytest_fixture_passes_and_fails(tmp_path: Path) -> None:
    (tmp_path / "test_users_suite.py").write_text(textwrap.dedent(FIXTURE_TESTS))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            # Wherever idemtools is pip-installed, the entry point loads the plugin by itself;
            # named explicitly here so the checkout's plugin is the one under test.
            "-p",
            "no:idemtools",
            "-p",
            "idemtools.testing.pytest_plugin",
            "-o",
            "asyncio_mode=auto",
            "-W",
            "ignore::DeprecationWarning",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "NotProtectedError" in done.stdout
    assert "idemtools.install(server)" in done.stdout


def test_pytest_plugin_is_registered_and_inert() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"idemtools": "idemtools.testing.pytest_plugin"}
    # Loaded into every pytest run where idemtools is installed: importing it must not import
    # the SDK (nor declare fields on its models).
    probe = (
        "import sys, idemtools.testing.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
