"""FastMCP 4.x's Client, keyed: results, .data and ToolError exactly as from Client.call_tool."""

import sys
from pathlib import Path

import anyio
from fastmcp import Client
from fastmcp.client.transports import StdioTransport

from idemtools.integrations.fastmcp import KeyedClient

# Found from this file, so the example runs from any working directory.
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "payments_server.py")]


async def main(server: list[str] = SERVER) -> str:
    transport = StdioTransport(command=server[0], args=server[1:])
    async with KeyedClient(Client(transport, timeout=30)) as client:
        result = await client.call_tool("charge", {"amount": 4200})
        return str(result.data)


if __name__ == "__main__":
    print(anyio.run(main))
