"""LangChain / LangGraph (langchain-mcp-adapters, mcp 1.x): one key per LangGraph tool call."""

import sys
from datetime import timedelta
from pathlib import Path

import anyio
from langchain_mcp_adapters.client import MultiServerMCPClient

from idemtools.integrations.langchain import KeyedToolCalls

# Found from this file, so the example runs from any working directory.
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "payments_server.py")]


async def main(server: list[str] = SERVER) -> str:
    connections = {
        "payments": {
            "transport": "stdio",
            "command": server[0],
            "args": server[1:],
            # A lost answer ends in a timeout (retried with the same key), not a hang.
            "session_kwargs": {"read_timeout_seconds": timedelta(seconds=30)},
        }
    }
    client = MultiServerMCPClient(
        connections,  # type: ignore[arg-type]
        tool_interceptors=[KeyedToolCalls(connections)],  # the same connections
    )
    tools = {tool.name: tool for tool in await client.get_tools()}
    # In a graph: ToolNode(list(tools.values())) with a RetryPolicy; a retry of the same tool
    # call (same tool_call_id, same thread) sends the same key. Called directly, as here,
    # there is no tool call id: KeyedSession's rule applies.
    return str(await tools["charge"].ainvoke({"amount": 4200}))


if __name__ == "__main__":
    print(anyio.run(main))
