"""LangGraph's retry against a stdio server on its default store: one execution, not two.

langchain-mcp-adapters opens a fresh session per tool call, and on stdio a session is a server
process: the retry of a tool call whose answer was lost reaches a new process. With records in
memory (`IDEMTOOLS_STORE=memory://`) that process runs the tool again; the default store on
stdio keeps them on disk, so the retry replays. The first answer is lost by an
interceptor around the keyed one: the tool ran, the graph sees an error and retries the same
tool call. langchain-mcp-adapters requires mcp < 2: this runs on the mcp 1.x leg
(tests/e2e/test_stdio_default_store.py proves the same with the plain SDK).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_mcp_adapters", reason="langchain-mcp-adapters is not installed")
pytest.importorskip("langgraph", reason="langgraph is not installed")

from langchain_core.messages import AIMessage
from langchain_mcp_adapters.client import MultiServerMCPClient
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import RetryPolicy

from idemtools.integrations.langchain import KeyedToolCalls

from .test_stdio_default_store import ROOT, SERVER, executions, server_env

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CALL = {"name": "work", "args": {"label": "pay"}, "id": "call_1", "type": "tool_call"}


class LoseFirstAnswer:
    """Outermost interceptor: the first call's answer never reaches the graph."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: Any, handler: Any) -> Any:
        result = await handler(request)
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("the answer was lost")
        return result


async def run_graph(tools: list[Any]) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="", tool_calls=[CALL])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    retry = RetryPolicy(max_attempts=2, initial_interval=0.01, jitter=False, retry_on=Exception)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=False), retry_policy=retry)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tools")
    graph.add_edge("tools", END)
    inputs: Any = {"messages": [("user", "pay")]}
    state = await graph.compile().ainvoke(inputs, config={"configurable": {"thread_id": "t1"}})
    return state["messages"][-1]


@pytest.mark.parametrize(("store", "expected"), [("memory://", 2), (None, 1)])
async def test_a_retried_tool_call_reaches_a_new_process_and_replays(
    tmp_path: Path, store: str | None, expected: int
) -> None:
    ledger = tmp_path / "ledger"
    connections: dict[str, Any] = {
        "boundary": {
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(SERVER), "sdk", "stdio", str(ledger), "default"],
            "env": server_env(store),  # the SDK passes only a few variables by default
            "cwd": str(ROOT),
        }
    }
    interceptors = [LoseFirstAnswer(), KeyedToolCalls(connections)]
    client = MultiServerMCPClient(connections, tool_interceptors=interceptors)  # type: ignore[arg-type]
    message = await run_graph(await client.get_tools())
    assert "done pay" in str(message.content)
    assert executions(ledger) == expected


async def test_outcome_unknown_is_not_resent_by_the_graph_retry(tmp_path: Path) -> None:
    """The stdio proxy's upstream dies mid-call (`idempotency_outcome_unknown`): the graph's
    retries of that tool call get the same error unsent (no new session, no second call)."""
    import os

    from idemtools.client import OutcomeUnknownError
    from tests.proxy.helpers import proxy_argv, received, upstream_argv

    log = tmp_path / "log"
    argv = proxy_argv("--store", f"sqlite:///{tmp_path / 'p.db'}", upstream=upstream_argv(log))
    connections: dict[str, Any] = {
        "proxy": {
            "transport": "stdio",
            "command": argv[0],
            "args": argv[1:],
            "env": {**os.environ, "PYTHONPATH": str(ROOT)},
            "cwd": str(ROOT),
        }
    }
    client = MultiServerMCPClient(connections, tool_interceptors=[KeyedToolCalls(connections)])  # type: ignore[arg-type]
    tools = await client.get_tools()

    def agent(state: MessagesState) -> dict[str, Any]:
        call = {"name": "die", "args": {"label": "d"}, "id": "call_1", "type": "tool_call"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False, retry_on=Exception)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=False), retry_policy=retry)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tools")
    graph.add_edge("tools", END)
    inputs: Any = {"messages": [("user", "die")]}
    with pytest.raises(OutcomeUnknownError):
        await graph.compile().ainvoke(inputs, config={"configurable": {"thread_id": "t1"}})
    methods = [m.get("method") for m in received(log)]
    assert methods.count("tools/call") == 1
    assert methods.count("initialize") == 2  # get_tools' session and the one call's
