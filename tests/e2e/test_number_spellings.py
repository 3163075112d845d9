"""What "numbers compare by value" means over a real transport, where the SDK parses the text.

The MCP SDK (pydantic) parses the request's JSON text before idemtools sees it: a number written
as an integer stays an exact Python int of any size, but one written with a fraction or an
exponent becomes an IEEE-754 double. So `9007199254740993.0` *is* the double 2**53 by the time it
is compared. docs/how-it-works.md states exactly this; the test plays it over stdio against the
example payments server, with raw JSON lines, so no client library re-spells the numbers.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from idemtools.server.adapters import SDK2

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "payments_server.py"
PROTOCOL = "2025-11-25"


class _Stdio:
    """Raw JSON-RPC lines to and from a server subprocess (each reply awaited, bounded)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # this checkout's idemtools
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.ids = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params_text: str) -> dict[str, Any]:
        """`params_text` goes on the wire as written: the numbers keep their spelling."""
        self.ids += 1
        self.send(
            f'{{"jsonrpc": "2.0", "id": {self.ids}, "method": "{method}", "params": {params_text}}}'
        )
        while True:
            reply: dict[str, Any] = json.loads(self.lines.get(timeout=30))
            if reply.get("id") == self.ids:
                return reply

    def charge(self, key: str, amount: str) -> dict[str, Any]:
        return self.request(
            "tools/call",
            f'{{"name": "charge", "arguments": {{"amount": {amount}}}, "idempotencyKey": "{key}"}}',
        )

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _kind(reply: dict[str, Any]) -> str:
    if "error" in reply:
        return str(reply["error"].get("data", {}).get("type"))
    return "result"


def _text(reply: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in reply["result"]["content"])


@pytest.mark.timeout(120)
def test_integer_spellings_are_exact_and_fractions_are_doubles() -> None:
    wire = _Stdio()
    try:
        init = wire.request(
            "initialize",
            json.dumps(
                {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"},
                }
            ),
        )
        assert "idempotency" in init["result"]["capabilities"]["tools"]
        wire.send('{"jsonrpc": "2.0", "method": "notifications/initialized"}')

        # Integers are exact at any size: 2**53 + 1 is not 2**53, nor its double spelling.
        first = wire.charge("k-int", "9007199254740993")
        assert _kind(first) == "result" and "9007199254740993" in _text(first), first
        assert _kind(wire.charge("k-int", "9007199254740993.0")) == "idempotency_key_conflict"
        assert _kind(wire.charge("k-int", "9007199254740993")) == "result"  # the replay

        # A fraction or exponent is parsed as a double: `...993.0` is 2**53, equal to `...992`.
        ran = wire.charge("k-frac", "9007199254740993.0")
        assert _kind(ran) == "result" and "9007199254740992" in _text(ran), ran
        for spelling in ("9007199254740992", "9007199254740992.0", "9.007199254740992e15"):
            again = wire.charge("k-frac", spelling)
            assert again == {**ran, "id": again["id"]}, (spelling, again)

        # Big integers beyond any double stay exact too.
        big = "123456789012345678901234567890"
        assert _kind(wire.charge("k-big", big)) == "result"
        assert _kind(wire.charge("k-big", big[:-1] + "1")) == "idempotency_key_conflict"

        # Beyond the double range a fraction or exponent is infinity. mcp 2.x hands it over as
        # such: refused, nothing runs. mcp 1.x re-encodes each request as JSON first, which
        # turns infinity into null: the tool gets `null` (and its validation error is replayed).
        beyond = wire.charge("k-inf", "1e400")
        if SDK2:
            assert _kind(beyond) == "idempotency_arguments_invalid", beyond
        else:
            assert beyond["result"]["isError"] is True and "None" in _text(beyond), beyond
            again = wire.charge("k-inf", "null")
            assert again == {**beyond, "id": again["id"]}  # the same request as `null`

        ledger = wire.request("tools/call", '{"name": "ledger", "arguments": {}}')
        charges = json.loads(_text(ledger))["charges"]
        assert charges == 3, ledger  # k-int, k-frac, k-big: each ran once
    finally:
        wire.close()
