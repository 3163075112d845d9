"""The 2026-07-28 era over a local stream pair (stdio, in-memory): still a local transport.

In that era the SDK wraps each request's dispatch context (no server-initiated requests), and
`by_auth_subject` must see through the wrapper to the stream `server.run` serves; FastMCP's
clients speak this era over stdio by default.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp.shared.memory import create_client_server_memory_streams

import idemtools
from tests.e2e.harness import LINE, MODERN_META, MemoryWire, lowlevel_of, make_app, result_text

pytestmark = pytest.mark.skipif(LINE != 2, reason="the 2026-07-28 era exists on mcp 2.x only")


async def test_by_auth_subject_works_over_a_local_stream_in_the_modern_era() -> None:
    app = make_app()
    lowlevel = lowlevel_of(app.server)
    params = {
        "name": "charge",
        "arguments": {"amount": 3},
        "idempotencyKey": "modern-local",
        "_meta": MODERN_META,
    }

    def serve() -> Any:
        # Only the server side is declared local: requests run in the context of the task
        # that sent them (the client's, here undeclared), so the stream must identify it.
        with idemtools.local_transport("memory"):
            return lowlevel.run(s_read, s_write, lowlevel.create_initialization_options())

    async with (
        create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(serve)
        wire = MemoryWire(c_read, c_write)
        tg.start_soon(wire.pump)
        with anyio.fail_after(10):
            first = await wire.call(params)
            again = await wire.call(params)
        tg.cancel_scope.cancel()
    assert "error" not in first, first
    assert result_text(again) == result_text(first)
    assert app.count("charge") == 1
