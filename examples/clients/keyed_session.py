"""KeyedSession: an mcp ClientSession (1.x or 2.x) whose call_tool sends idempotencyKey."""

import sys
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from idemtools.client import KeyedSession

# Found from this file, so the example runs from any working directory.
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "payments_server.py")]


async def main(server: list[str] = SERVER) -> str:
    params = StdioServerParameters(command=server[0], args=server[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        keyed = KeyedSession(session)  # use it wherever the session was used
        for attempt in range(3):  # any retry loop: yours, a framework's, a model's
            try:
                with anyio.fail_after(30):  # a lost answer must end in a timeout, not a hang
                    result = await keyed.call_tool("charge", {"amount": 4200})
                break
            except Exception:  # a timeout or lost connection: the same call again is safe
                if attempt == 2:
                    raise
        return result.content[0].text  # type: ignore[union-attr]


if __name__ == "__main__":
    print(anyio.run(main))
