"""idemtools.integrations.langchain through LangGraph's real retry path.

No model: a graph node emits the AI message with the tool call, a `ToolNode` with a LangGraph
`RetryPolicy` runs the langchain-mcp-adapters tools (a fresh MCP session per call, the
adapters' default) against a real idemtools server over streamable HTTP whose first answer is
lost. The retry re-runs the same tool call (same `tool_call_id`) on a new session.
langchain-mcp-adapters 0.3 requires mcp < 2: this runs on the mcp 1.x leg.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import timedelta
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

from .harness import App, make_app, serve_asgi
from .lossy import Loss
from .lossy_http import LossyASGI

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@contextlib.contextmanager
def lossy_http(app: App, loss: Loss) -> Iterator[str]:
    with serve_asgi(LossyASGI(app.server.streamable_http_app(), loss), "/mcp") as url:
        yield url


def connections(url: str) -> dict[str, Any]:
    return {
        "shop": {
            "transport": "streamable_http",
            "url": url,
            "headers": {"Authorization": "Bearer tok-alice"},
            "session_kwargs": {"read_timeout_seconds": timedelta(seconds=0.5)},
        }
    }


async def run_graph(tools: list[Any], call: dict[str, Any], thread: str = "t1") -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    retry = RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=False, retry_on=Exception)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=False), retry_policy=retry)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "tools")
    graph.add_edge("tools", END)
    compiled: Any = graph.compile()  # its overloads differ between langgraph releases
    state = await compiled.ainvoke(
        {"messages": [("user", "charge")]}, config={"configurable": {"thread_id": thread}}
    )
    return state["messages"][-1]


class Recording(KeyedToolCalls):
    """Records the key each tool call derived (None: no LangGraph runtime reached it)."""

    keys: list[str | None]

    def key_of(self, request: Any) -> str | None:
        key = super().key_of(request)
        vars(self).setdefault("keys", []).append(key)
        return key


CALL = {"name": "charge", "args": {"amount": 5}, "id": "call_1", "type": "tool_call"}


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "keyed"])
async def test_a_retried_tool_node_after_a_lost_answer(with_keys: bool) -> None:
    app = make_app(auth=True)
    with lossy_http(app, Loss(drop=1)) as url:
        conns = connections(url)
        interceptor = Recording(conns, namespace="ns")
        interceptors = [interceptor] if with_keys else []
        client = MultiServerMCPClient(conns, tool_interceptors=interceptors)  # type: ignore[arg-type]
        message = await run_graph(await client.get_tools(), CALL)
    assert app.count("charge") == (1 if with_keys else 2)
    assert ("#1" if with_keys else "#2") in str(message.content)
    if with_keys:  # both attempts: the same tool call, so the same key, from its id
        assert interceptor.keys == ["lc:ns:2:t1:call_1"] * 2


async def test_tool_call_ids_that_restart_per_thread_do_not_collide() -> None:
    app = make_app(auth=True)
    with lossy_http(app, Loss(drop=0)) as url:
        conns = connections(url)
        client = MultiServerMCPClient(conns, tool_interceptors=[KeyedToolCalls(conns)])  # type: ignore[arg-type]
        tools = await client.get_tools()
        await run_graph(tools, CALL, thread="t1")
        await run_graph(tools, CALL, thread="t2")  # another conversation's call_1
    assert app.count("charge") == 2


async def test_tools_loaded_from_a_keyed_session() -> None:
    from langchain_mcp_adapters.tools import load_mcp_tools

    from idemtools.client.keyed_session import KeyedSession

    from .lossy import lossy_session, read_timeout

    app = make_app()
    async with lossy_session(app.server, Loss(drop=1)) as session:
        interceptor = Recording(namespace="ns")  # no connections: the session sends the key
        tools = await load_mcp_tools(
            KeyedSession(session),  # type: ignore[arg-type]
            tool_interceptors=[interceptor],
            server_name="shop",
        )
        # A short read timeout per call, so that the lost answer is given up on quickly.
        session._session_read_timeout_seconds = read_timeout(0.5)
        message = await run_graph(tools, CALL)
    assert app.count("charge") == 1 and "#1" in str(message.content)
    assert interceptor.keys == ["lc:ns:2:t1:call_1"] * 2
