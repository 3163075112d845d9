"""OpenAI Agents SDK: one key per MCPServer.call_tool, sent by each of its retries."""

import sys
from pathlib import Path

import anyio
from agents import Agent
from agents.mcp import MCPServerStdio

from idemtools.integrations.openai_agents import keyed

# Found from this file, so the example runs from any working directory.
SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "payments_server.py")]


async def main(server: list[str] = SERVER) -> str:
    payments = keyed(
        MCPServerStdio(
            {"command": server[0], "args": server[1:]},
            max_retry_attempts=3,  # the SDK's own retries: now safe for side effects
            client_session_timeout_seconds=30,
        )
    )
    async with payments:
        agent = Agent(name="shop", mcp_servers=[payments])  # Runner.run(agent, ...) as usual
        # What the runner does with the model's tool call:
        result = await payments.call_tool("charge", {"amount": 4200})
        del agent
        return result.content[0].text  # type: ignore[union-attr]


if __name__ == "__main__":
    print(anyio.run(main))
