"""pydantic-ai: an MCPToolset whose tool calls send keys (a ModelRetry's equal call reuses it)."""

import sys
from pathlib import Path

import anyio
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent

from idemtools.integrations.pydantic_ai import KeyedMCPToolset

# Found from this file, so the example runs from any working directory.
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "payments_server.py")]


async def main(server: list[str] = SERVER) -> str:
    transport = StdioTransport(command=server[0], args=server[1:])
    toolset = KeyedMCPToolset(Client(transport, timeout=30))  # or KeyedMCPToolset(url)
    agent = Agent("test", toolsets=[toolset])  # your model instead of "test"
    async with agent:
        # What the agent does with the model's tool call:
        result = await toolset.direct_call_tool("charge", {"amount": 4200})
        return str(result)


if __name__ == "__main__":
    print(anyio.run(main))
