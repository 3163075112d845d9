"""A low-level `Server` on stdio with no store gets the stdio default when its caller declares
the transport: `server.run()` inside `idemtools.local_transport("stdio")`.

A low-level server's transport is its caller's code, so idemtools knows it serves stdio only from
that declaration (the one `by_auth_subject` reads too). Declared, the default is the SQLite file
in the user's state directory (tests/conftest.py points `XDG_STATE_HOME` at a temporary one) and
a retry sent to a new process replays; `IDEMTOOLS_STORE=memory://` is the "before". Undeclared,
the transport is not identified and the server stays on `MemoryStore`, as documented.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools.client import NO_RETRY, call_tool
from idemtools.stores.default import default_store_path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "server" / "lowlevel_stdio_server.py"


def server_env(store: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "IDEMTOOLS_STORE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if store is not None:
        env["IDEMTOOLS_STORE"] = store
    return env


async def one_attempt(ledger: Path, mode: str, env: dict[str, str], errlog: Any) -> str:
    """A fresh server process for one keyed call, gone when it returns."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER), str(ledger), mode], env=env, cwd=str(ROOT)
    )
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await call_tool(
            session, "work", {"label": "pay"}, idempotency_key="k-1", retry=NO_RETRY
        )
        text: str = result.content[0].text
        return text


@pytest.mark.parametrize(
    ("mode", "store", "expected"),
    [("declared", "memory://", 2), ("declared", None, 1), ("undeclared", None, 2)],
)
def test_a_fresh_process_per_attempt_replays_when_stdio_is_declared(
    tmp_path: Path, mode: str, store: str | None, expected: int
) -> None:
    ledger = tmp_path / "ledger"
    env = server_env(store)

    async def main() -> list[str]:
        with (tmp_path / "server.log").open("w") as errlog:
            # The first answer is lost (the host never reads it); the retry is a new process.
            return [await one_attempt(ledger, mode, env, errlog) for _ in range(2)]

    first, retry = anyio.run(main)
    assert len(ledger.read_text().splitlines()) == expected, (tmp_path / "server.log").read_text()
    path = default_store_path("lowlevel-stdio", str(SERVER))
    if expected == 1:
        assert retry == first  # replayed: the first process's pid in the answer
        assert path.exists()
    else:
        assert retry != first
        assert not path.exists()
