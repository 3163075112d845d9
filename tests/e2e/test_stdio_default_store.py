"""A stdio server with no store keeps its records across its own processes.

Hosts start a fresh stdio server process per tool call (langchain-mcp-adapters opens a session
per call) or restart it between a call and its retry. With records in memory the retry, sent to a
new process with the same key, runs the tool again; the default store on stdio is a SQLite file in
the user's state directory (tests/conftest.py points `XDG_STATE_HOME` at a temporary one), so the
retry replays. Each test runs with `IDEMTOOLS_STORE=memory://` too, for the comparison.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools.client import NO_RETRY, call_tool
from idemtools.server.scope_fit import Serving
from idemtools.stores.default import default_store_path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "e2e" / "boundary_server.py"


def server_env(store: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "IDEMTOOLS_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if store is not None:
        env["IDEMTOOLS_STORE"] = store
    return env


async def one_attempt(ledger: Path, key: str, env: dict[str, str], errlog: Any) -> str:
    """A fresh server process for one keyed call, gone when it returns."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER), "sdk", "stdio", str(ledger), "default"],
        env=env,
        cwd=str(ROOT),
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await call_tool(
            session, "work", {"label": "pay"}, idempotency_key=key, retry=NO_RETRY
        )
        text: str = result.content[0].text
        return text


def executions(ledger: Path) -> int:
    return len(ledger.read_text().splitlines()) if ledger.exists() else 0


@pytest.mark.parametrize(("store", "expected"), [("memory://", 2), (None, 1)])
def test_a_fresh_process_per_attempt_runs_the_tool_once(
    tmp_path: Path, store: str | None, expected: int
) -> None:
    """A host that restarts the server between a call and its retry, or starts one per call
    (langchain-mcp-adapters): the retry reaches a new process and replays."""
    ledger = tmp_path / "ledger"
    env = server_env(store)

    async def main() -> list[str]:
        with (tmp_path / "server.log").open("w") as errlog:
            # The first answer is lost (the host never reads it); the retry is a new process.
            return [await one_attempt(ledger, "k-1", env, errlog) for _ in range(2)]

    first, retry = anyio.run(main)
    assert executions(ledger) == expected
    if expected == 1:
        assert retry == first  # replayed: the same pid in the answer, the first process's
        assert_the_users_own_file()


def assert_the_users_own_file() -> None:
    """One file for this server and entry point, in a 0700 directory, itself 0600."""
    found = list(Path(os.environ["XDG_STATE_HOME"], "idemtools").glob("boundary-server-*.db"))
    assert len(found) == 1, found
    assert found[0] == default_store_path("boundary-server", str(SERVER))
    assert stat.S_IMODE(found[0].parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(found[0].stat().st_mode) == 0o600
    # Another entry point with the same server name gets a file of its own.
    assert default_store_path("boundary-server", "/elsewhere/server.py") != found[0]


def test_an_unwritable_state_directory_starts_on_memory_with_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = server_env(None)
    env["XDG_STATE_HOME"] = str(blocker / "state")  # below a file: no directory can be made
    ledger = tmp_path / "ledger"
    log = tmp_path / "server.log"

    async def main() -> str:
        with log.open("w") as errlog:
            return await one_attempt(ledger, "k-1", env, errlog)

    assert anyio.run(main).startswith("done pay")  # the server started and served
    warnings = [line for line in log.read_text().splitlines() if "cannot keep records" in line]
    assert len(warnings) == 1, log.read_text()
    assert warnings[0].startswith("WARNING")
    assert str(blocker / "state" / "idemtools") in warnings[0]
    assert "NotADirectoryError" in warnings[0] or "FileExistsError" in warnings[0]


def _server() -> Any:
    from tests.e2e.harness import _Server

    return _Server("in-process")


def test_off_stdio_the_default_stays_memory_and_the_environment_opts_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import idemtools
    from idemtools.stores import MemoryStore, SQLiteStore

    monkeypatch.delenv("IDEMTOOLS_STORE", raising=False)
    http = _server()
    installation = idemtools.install(http)
    http.streamable_http_app()  # HTTP: the process lives as long as its records must
    assert isinstance(installation.store, MemoryStore)
    assert not list(Path(os.environ["XDG_STATE_HOME"]).rglob("*.db"))

    monkeypatch.setenv("IDEMTOOLS_STORE", f"sqlite:///{os.environ['XDG_STATE_HOME']}/own.db")
    assert isinstance(idemtools.install(_server()).store, SQLiteStore)  # named: used as is


async def test_the_in_memory_transport_fixes_memory_before_the_first_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import idemtools
    from idemtools.stores import MemoryStore

    from .lossy import Loss, lossy_session

    monkeypatch.delenv("IDEMTOOLS_STORE", raising=False)
    server = _server()

    @server.tool()
    def ping() -> str:
        return "pong"

    installation = idemtools.install(server)
    async with lossy_session(server, Loss(drop=0)) as session:
        await call_tool(session, "ping", {}, idempotency_key="k", retry=NO_RETRY)
    installation.note_serving(Serving("stdio"))
    assert isinstance(installation.store, MemoryStore)  # served already: never swapped
