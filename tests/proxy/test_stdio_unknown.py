""" "Unknown tool, nothing ran" is told by the upstream's own answer; every other error of a
keyed call is recorded, also of a tool the upstream does not list."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conformance.kit import server_command
from tests.conformance.test_typescript import TS, node  # noqa: F401  (the fixture)

from .helpers import Session, executions, proxy_argv, received
from .test_stdio import start

pytestmark = pytest.mark.slow


def test_an_unlisted_tools_error_is_recorded(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        first = s.call(1, "hidden", "k-h", label="h")
        assert first["error"]["code"] == 1002
        assert s.call(2, "hidden", "k-h", label="h")["error"] == first["error"]
        assert s.close() == 0
    assert executions(log, "h") == 1


def test_retries_of_an_unlisted_name_read_the_listing_once(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        for rid in range(1, 6):
            assert s.call(rid, "nope", f"k-{rid % 2}", label="n")["error"]["code"] == -32602
        assert s.close() == 0
    assert executions(log, "n") == 5  # nothing ran, nothing recorded: each call went upstream
    assert [m.get("method") for m in received(log)].count("tools/list") == 1


def unknown_is_not_recorded(
    upstream: list[str], texts: set[str], name: str = "no_such_tool"
) -> None:
    """Two keyed calls of an unknown tool under one key, other arguments: a recorded refusal
    would answer the second with a conflict; nothing recorded, the SDK answers again."""
    with Session(proxy_argv(upstream=upstream)) as s:
        s.initialize()
        answers: list[Any] = [s.call(rid, name, "k-u", label=str(rid)) for rid in (1, 2)]
        for answer in answers:
            assert "result" in answer, answer
            result = answer["result"]
            assert result["isError"] is True and result["content"][0]["text"] in texts, answer
        assert s.close() == 0


@pytest.mark.sdk  # FastMCP on mcp 1.x, MCPServer on 2.x: every supported release
def test_the_python_sdks_unknown_tool_answer_is_not_recorded() -> None:
    unknown_is_not_recorded(
        server_command("highlevel", "--no-install"), {"Unknown tool: no_such_tool"}
    )


def test_the_typescript_sdks_unknown_tool_answers_are_not_recorded(node: str) -> None:  # noqa: F811
    server = [node, str(Path(__file__).with_name("ts_mcpserver.mjs")), str(TS / "node_modules")]
    unknown_is_not_recorded(server, {"MCP error -32602: Tool no_such_tool not found"})
    unknown_is_not_recorded(server, {"MCP error -32602: Tool off disabled"}, "off")


def test_a_low_level_servers_own_refusal_is_decided_by_its_listing(node: str) -> None:  # noqa: F811
    # The TypeScript fixture server dispatches names itself: `Error("unknown tool X")`, a
    # JSON-RPC -32603 from no SDK's tool manager; its tools/list, which lacks X, decides.
    with Session(proxy_argv(upstream=[node, str(TS / "server.mjs")])) as s:
        s.initialize()
        for rid in (1, 2):
            answer = s.call(rid, "no_such_tool", "k-u", label=str(rid))
            assert answer["error"]["message"] == "unknown tool no_such_tool", answer
        assert s.close() == 0
