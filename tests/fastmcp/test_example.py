"""examples/fastmcp_server.py as it is deployed: a stdio subprocess (FastMCP's client) and an
HTTP subprocess with its own token verifier (raw JSON-RPC, both eras).

The server process imports no idemtools client code, so the capability seen here is the one
the server put on the wire (in-process tests share the client's model declarations).
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import contextlib  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
from fastmcp import Client  # noqa: E402
from fastmcp.client.transports import StdioTransport  # noqa: E402

from idemtools import ConflictError  # noqa: E402
from idemtools.client import NO_RETRY, advertises_idempotency, call_tool  # noqa: E402
from tests.fastmcp.app import text  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "fastmcp_server.py"


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_example_server_over_stdio(mode: str, era: str) -> None:
    # The whole environment: on stdio the server's default store lives under XDG_STATE_HOME,
    # the test's own (the SDK passes only HOME and PATH by default).
    transport = StdioTransport(
        command=sys.executable, args=[str(EXAMPLE)], env=dict(os.environ), cwd=str(ROOT)
    )
    async with Client(transport, mode=mode, timeout=60) as client:
        assert client.protocol_version == era
        assert await advertises_idempotency(client.session)

        async def keyed(name: str, arguments: dict[str, Any], key: str) -> str:
            result = await call_tool(
                client.session, name, arguments, idempotency_key=key, retry=NO_RETRY
            )
            return text(result)

        first = await keyed("charge", {"amount": 4200, "currency": "usd"}, "order-1")
        assert await keyed("charge", {"amount": 4200, "currency": "usd"}, "order-1") == first
        with pytest.raises(ConflictError):
            await keyed("charge", {"amount": 1, "currency": "usd"}, "order-1")
        refund = await keyed("refund_payment", {"charge_id": 1}, "refund-1")
        assert await keyed("refund_payment", {"charge_id": 1}, "refund-1") == refund
        label = await keyed("shipping_create_label", {"order": "o-1"}, "label-1")
        assert await keyed("shipping_create_label", {"order": "o-1"}, "label-1") == label
        ledger = (await client.call_tool("ledger", {})).structured_content
    assert ledger == {"result": ["charge 4200 usd", "refund 1", "label o-1"]}


@contextlib.contextmanager
def example_over_http() -> Iterator[str]:
    """`python examples/fastmcp_server.py --http PORT`; yields the endpoint URL."""
    from tests.e2e.harness import _free_port

    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLE), "--http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                _, err = process.communicate(timeout=5)
                pytest.fail(f"the example did not start: {err.decode()[-2000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.communicate(timeout=10)


@pytest.mark.slow
async def test_example_server_over_http_with_its_token_verifier() -> None:
    from tests.e2e.harness import LEGACY, MODERN, http_wire, result_text

    call = {
        "name": "charge",
        "arguments": {"amount": 5, "currency": "eur"},
        "idempotencyKey": "http-1",
    }
    with example_over_http() as url:
        for era in (LEGACY, MODERN):
            async with (
                http_wire(url, era, "demo-alice") as alice,
                http_wire(url, era, "demo-bob") as bob,
            ):
                assert alice.initialize["capabilities"]["tools"]["idempotency"] == {}
                mine = result_text(await alice.call(call))
                assert result_text(await alice.call(call)) == mine
                assert result_text(await bob.call(call)) != mine
