"""Telling "unknown tool, nothing ran" from a tool's own error, by the upstream's answer.

An unknown tool ran nothing, so its refusal is answered, not recorded: a rolling deploy that
adds the tool must not replay the refusal for a retention window. Every other error is the
call's outcome and is recorded, so the tool never runs twice. A tool can be callable and
unlisted (hidden, per-user or admin tools; low-level servers dispatch names they do not list),
so the upstream's `tools/list` alone cannot tell: the answer decides.

`UNKNOWN`: an answer the SDKs' tool managers give before any handler runs (docs/proxy.md lists
each, with its SDK and version). `AMBIGUOUS`: an error (JSON-RPC, or an `isError` result of one
text block) that names the tool and says "unknown" or "not found", from no tool manager the proxy
knows (low-level servers dispatch names themselves); the upstream's catalog decides
(`ToolCatalog`). `RAN`: anything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["Verdict", "sdk_unknown_texts", "verdict"]

_ENVELOPE = frozenset({"content", "isError", "resultType", "_meta"})


class Verdict(enum.Enum):
    UNKNOWN = "unknown"
    """An SDK's own "unknown tool" answer: nothing ran."""
    AMBIGUOUS = "ambiguous"
    """Looks like an unknown-tool refusal, from no SDK the proxy knows: ask the catalog."""
    RAN = "ran"
    """The tool's outcome: recorded."""


def sdk_unknown_texts(name: str) -> frozenset[str]:
    """The text of the one content block of an SDK's `isError` answer for an unknown tool.

    - mcp (Python) 1.x FastMCP and 2.x MCPServer: `Unknown tool: NAME`;
    - @modelcontextprotocol/sdk (TypeScript) 1.x McpServer: `MCP error -32602: Tool NAME not
      found`, and `... Tool NAME disabled` for a disabled one (nothing runs either).
    """
    return frozenset(
        {
            f"Unknown tool: {name}",
            f"MCP error -32602: Tool {name} not found",
            f"MCP error -32602: Tool {name} disabled",
        }
    )


def _only_text(result: Mapping[str, Any]) -> str | None:
    content = result.get("content")
    if not isinstance(content, list) or len(content) != 1:
        return None
    block = content[0]
    if not isinstance(block, dict) or block.get("type") != "text" or set(block) != {"type", "text"}:
        return None
    text = block.get("text")
    return text if isinstance(text, str) else None


def _sounds_unknown(text: str, name: str) -> bool:
    lowered = text.lower()
    return name in text and ("unknown" in lowered or "not found" in lowered)


def verdict(name: str, reply: Mapping[str, Any]) -> Verdict:
    """What the upstream's answer to a `tools/call` of `name` says about whether it ran."""
    error = reply.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        if isinstance(message, str) and _sounds_unknown(message, name):
            return Verdict.AMBIGUOUS
        return Verdict.RAN
    result = reply.get("result")
    if not isinstance(result, dict) or result.get("isError") is not True:
        return Verdict.RAN
    text = _only_text(result)
    if text is None:
        return Verdict.RAN
    if (
        set(result) <= _ENVELOPE
        and result.get("resultType", "complete") == "complete"
        and text in sdk_unknown_texts(name)
    ):
        return Verdict.UNKNOWN
    return Verdict.AMBIGUOUS if _sounds_unknown(text, name) else Verdict.RAN
