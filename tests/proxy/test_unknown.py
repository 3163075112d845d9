"""Which upstream answers mean "unknown tool, nothing ran" (in-process)."""

from __future__ import annotations

from typing import Any

import pytest

from idemtools.proxy.unknown import Verdict, verdict


def is_error(text: str, **more: Any) -> dict[str, Any]:
    return {"result": {"content": [{"type": "text", "text": text}], "isError": True, **more}}


@pytest.mark.parametrize(
    ("reply", "seen"),
    [
        (is_error("Unknown tool: pay"), Verdict.UNKNOWN),  # mcp 1.x FastMCP, 2.x MCPServer
        (is_error("Unknown tool: pay", resultType="complete", _meta={}), Verdict.UNKNOWN),
        (is_error("MCP error -32602: Tool pay not found"), Verdict.UNKNOWN),  # TS McpServer
        (is_error("MCP error -32602: Tool pay disabled"), Verdict.UNKNOWN),
        (is_error("Unknown tool: pay", structuredContent={}), Verdict.AMBIGUOUS),
        (is_error("Unknown tool: other"), Verdict.RAN),
        (is_error("Error executing tool pay: Unknown tool: pay"), Verdict.AMBIGUOUS),
        (is_error("card declined"), Verdict.RAN),
        ({"error": {"code": -32602, "message": "Unknown tool: pay"}}, Verdict.AMBIGUOUS),
        ({"error": {"code": -32603, "message": "unknown tool pay"}}, Verdict.AMBIGUOUS),
        ({"error": {"code": -32602, "message": "Invalid arguments for tool pay"}}, Verdict.RAN),
        ({"error": {"code": 1001, "message": "declined", "data": {}}}, Verdict.RAN),
        ({"result": {"content": [], "isError": False}}, Verdict.RAN),
    ],
)
def test_verdicts(reply: dict[str, Any], seen: Verdict) -> None:
    assert verdict("pay", reply) is seen
