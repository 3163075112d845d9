"""idemtools.integrations.pydantic_ai through pydantic-ai's real retry path.

No model: a `FunctionModel` (a local function standing in for the model) emits the tool call,
and when pydantic-ai answers with a retry prompt (its `ModelRetry` on an `McpError`: here a
timeout, because the server's first answer is lost) it emits the same call again, with a new
tool-call id, as a model does. The agent loop, the toolset and FastMCP's `Client` are real.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

from typing import Any  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (extra pydantic-ai)")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from idemtools.integrations.pydantic_ai import KeyedMCPToolset  # noqa: E402
from tests.fastmcp.lossy_shop import client_for, make_shop  # noqa: E402


def _retry(part: Any) -> bool:
    """A retry prompt: pydantic-ai 2.x sends ModelRetry back as a 'retried' tool return."""
    return isinstance(part, RetryPromptPart) or getattr(part, "outcome", None) == "retried"


def model_that_retries(tool: str, arguments: dict[str, Any]) -> FunctionModel:
    """Call `tool`; on a retry prompt call it again (new id, keys reordered); then finish."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        returned = [p for p in parts if isinstance(p, ToolReturnPart) and not _retry(p)]
        if returned:
            return ModelResponse(parts=[TextPart(f"done: {returned[0].content}")])
        retried = sum(
            1 for m in messages if isinstance(m, ModelRequest) for p in m.parts if _retry(p)
        )
        args = dict(reversed(list(arguments.items()))) if retried else arguments
        return ModelResponse(parts=[ToolCallPart(tool, args, tool_call_id=f"call-{retried}")])

    return FunctionModel(respond)


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "keyed"])
async def test_a_model_retry_after_a_lost_answer(with_keys: bool) -> None:
    shop = make_shop()
    async with client_for(shop, drop=1, timeout=0.3) as client:
        toolset_class = KeyedMCPToolset if with_keys else MCPToolset
        toolset = toolset_class(client, max_retries=3)
        agent = Agent(model_that_retries("charge", {"amount": 5}), toolsets=[toolset])
        result = await agent.run("charge 5")
    assert shop.runs == (["charge"] if with_keys else ["charge", "charge"])
    assert ("'run': 1" if with_keys else "'run': 2") in result.output


async def test_in_progress_is_waited_out_before_pydantic_ai_sees_it() -> None:
    # The first call times out while the tool runs; the model's retry meets in_progress,
    # which KeyedMCPToolset waits out: one execution, and no third call from the model.
    shop = make_shop()
    calls: list[str] = []
    async with client_for(shop, drop=0, timeout=0.3) as client:
        toolset = KeyedMCPToolset(client, max_retries=3)
        base = model_that_retries("slow", {"n": 1})

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            calls.append("model")
            if len(calls) == 2:
                shop.gate.set()  # the tool finishes while the retry waits
            assert base.function is not None
            response = base.function(messages, info)
            assert isinstance(response, ModelResponse)
            return response

        agent = Agent(FunctionModel(respond), toolsets=[toolset])
        result = await agent.run("slow")
    assert shop.runs == ["slow"] and "slow 1" in result.output
    assert len(calls) == 3  # call, retry (waited out), final answer


async def test_a_per_run_copy_is_keyed_too() -> None:
    from idemtools.integrations.fastmcp import KeyedClient

    toolset = KeyedMCPToolset("http://127.0.0.1:1/mcp", headers=lambda ctx: {"x-user": "u"})
    assert isinstance(toolset.client, KeyedClient)
    copied = await toolset.for_run(None)  # type: ignore[arg-type]  # the headers ignore it
    assert copied is not toolset and isinstance(copied.client, KeyedClient)
    assert copied.client.retry_keys is not toolset.client.retry_keys  # keys of its own


async def test_outcome_unknown_reaches_the_application_not_the_model(tmp_path: Any) -> None:
    """The proxy's upstream dies mid-call: `idempotency_outcome_unknown`. pydantic-ai turns an
    `McpError` into `ModelRetry`; `OutcomeUnknownError` is not one, so the run ends with it and
    the model is never asked to call again (through the real stdio proxy)."""
    import os

    from fastmcp import Client
    from fastmcp.client.transports import StdioTransport

    from idemtools.client import OutcomeUnknownError
    from tests.proxy.helpers import ROOT, executions, proxy_argv, upstream_argv

    log = tmp_path / "log"
    argv = proxy_argv("--store", f"sqlite:///{tmp_path / 'p.db'}", upstream=upstream_argv(log))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    client = Client(StdioTransport(argv[0], argv[1:], env=env, cwd=str(ROOT)))
    asked: list[int] = []
    base = model_that_retries("die", {"label": "d"})

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        return base.function(messages, info)  # type: ignore[misc,return-value]

    agent = Agent(FunctionModel(respond), toolsets=[KeyedMCPToolset(client, max_retries=3)])
    with pytest.raises(OutcomeUnknownError):
        await agent.run("die")
    assert len(asked) == 1 and executions(log, "d") == 1
