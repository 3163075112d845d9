"""mcp 1.x: a `tools/call` handler is wrapped where dispatch looks it up, whatever edited the
handler dict (`request_handlers |= {...}` would bypass a guard in a dict subclass, since
`dict.__ior__` never calls `__setitem__`, and those keyed calls would run unprotected)."""

from __future__ import annotations

from typing import Any

import pytest

import idemtools
from tests.e2e.harness import LINE, types
from tests.server.adapters.test_install import _lowlevel_server, _twice

pytestmark = pytest.mark.skipif(LINE != 1, reason="the mcp 1.x handler dict")


def _raw_handler(server: Any, runs: list[int]) -> Any:
    """A `tools/call` handler built by the SDK's own decorator, taken out of the dict."""
    scratch = type(server)("scratch")

    @scratch.call_tool()  # type: ignore[misc]
    async def call_tool1(name: str, arguments: dict[str, Any]) -> list[Any]:
        runs.append(arguments["x"])
        return [types.TextContent(type="text", text=f"added {arguments['x']}")]

    return scratch.request_handlers[types.CallToolRequest]


async def test_handler_merged_in_with_ior_is_protected() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs, register=False)
    idemtools.install(server)
    server.request_handlers |= {types.CallToolRequest: _raw_handler(server, runs)}
    await _twice(server, "k-ior")
    assert runs == [2]


async def test_handler_merged_in_with_update_or_a_new_dict_is_protected() -> None:
    runs: list[int] = []
    server = _lowlevel_server(runs, register=False)
    idemtools.install(server)
    dict.update(server.request_handlers, {types.CallToolRequest: _raw_handler(server, runs)})
    await _twice(server, "k-update")
    server.request_handlers = {**server.request_handlers}
    server.request_handlers[types.CallToolRequest] = _raw_handler(server, runs)
    await _twice(server, "k-new")
    assert runs == [2, 2]
