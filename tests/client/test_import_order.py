"""Importing `idemtools.client` after a session connected (mcp 2.x).

mcp 2.x parses the server's `initialize` answer into `ToolsCapability`, which has no
`idempotency` field and drops it; idemtools' client half keeps it by parsing into a subclass,
a patch of `ClientSession` applied when `idemtools.client` is imported. A session that connected
before that import has lost the field for good: whether the server advertises the capability
cannot be known from it. `KeyedSession` must say exactly that (and what to do), not claim that
the server does not advertise it. A session connected after the import works as always.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from idemtools.server.adapters import SDK2

ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = """
import json, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    server = StdioServerParameters(command=sys.executable, args=[{server!r}], env={env!r})
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as raw:
            if {import_first!r}:
                from idemtools.client import KeyedSession
            await raw.initialize()
            from idemtools.client import KeyedSession
            try:
                result = await KeyedSession(raw).call_tool("charge", {{"amount": 5}})
                print(json.dumps({{"ok": result.content[0].text}}))
            except Exception as exc:
                print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}))

anyio.run(main)
"""


def run(import_first: bool, tmp_path: Path) -> dict[str, str]:
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT), "IDEMTOOLS_STORE": "memory://"}
    script = _SCRIPT.format(
        server=str(ROOT / "examples" / "payments_server.py"), env=env, import_first=import_first
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.slow
def test_connect_first_then_import(tmp_path: Path) -> None:
    # (Imported first, the same call works: tests/test_client_imports.py.)
    after = run(import_first=False, tmp_path=tmp_path)
    if not SDK2:  # mcp 1.x keeps the field as an extra: the order never mattered
        assert after["ok"].startswith("charged 5")
        return
    assert after["error"] == "IdempotencyNotSupportedError"
    message = after["message"]
    assert "connected before idemtools.client was imported" in message
    assert "does not advertise" not in message
    assert "import idemtools.client before connecting" in message
