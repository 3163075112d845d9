"""idemtools.integrations.openai_agents through the Agents SDK's real retry path.

No model: the tool call is driven as the agent runner drives it (`MCPUtil.invoke_mcp_tool` →
`MCPServer.call_tool`), with `max_retry_attempts`, against a real idemtools server whose first
answer is lost. Streamable HTTP retries on a fresh, isolated session; the base class (stdio, SSE)
retries on its one session (`_run_with_retries`): both are run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

pytest.importorskip("agents", reason="openai-agents is not installed (extra openai-agents)")

from agents.mcp import MCPServerStreamableHttp, MCPUtil
from agents.mcp.server import _MCPServerWithClientSession
from agents.run_context import RunContextWrapper
from mcp.shared.memory import create_client_server_memory_streams

import idemtools
from idemtools import IdempotencyNotSupportedError
from idemtools.integrations.openai_agents import keyed

from .harness import App, _Server, lowlevel_of, make_app, serve_asgi
from .lossy import Loss, _LossyWrite
from .lossy_http import LossyASGI

TOKEN = {"Authorization": "Bearer tok-alice"}
# openai-agents 0.24 on mcp 1.x still calls the SDK's deprecated streamablehttp_client.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Use `streamable_http_client` instead:DeprecationWarning"
)


@contextlib.contextmanager
def lossy_http(app: App, loss: Loss) -> Iterator[str]:
    asgi = app.server.streamable_http_app()
    with serve_asgi(LossyASGI(asgi, loss), "/mcp") as url:
        yield url


def http_server(url: str) -> MCPServerStreamableHttp:
    return MCPServerStreamableHttp(
        {"url": url, "headers": TOKEN},
        client_session_timeout_seconds=0.5,  # the lost answer is given up on after this
        max_retry_attempts=2,
        retry_backoff_seconds_base=0.01,
    )


class InProcess(_MCPServerWithClientSession):
    """An agents MCP server over in-memory streams to `app`, losing `loss.drop` tool results:
    the base class's `_run_with_retries` on one session, as for stdio and SSE."""

    def __init__(self, app: App, loss: Loss) -> None:
        super().__init__(
            cache_tools_list=False,
            client_session_timeout_seconds=0.5,
            max_retry_attempts=2,
            retry_backoff_seconds_base=0.01,
        )
        self.app, self.loss = app, loss

    @property
    def name(self) -> str:
        return "in-process"

    @contextlib.asynccontextmanager
    async def create_streams(self) -> AsyncIterator[Any]:
        lowlevel = lowlevel_of(self.app.server)
        with idemtools.local_transport("memory"):
            async with (
                create_client_server_memory_streams() as ((c_read, c_write), (s_read, s_write)),
                anyio.create_task_group() as tg,
            ):
                lossy: Any = _LossyWrite(s_write, self.loss)
                options = lowlevel.create_initialization_options()
                tg.start_soon(lambda: lowlevel.run(s_read, lossy, options))
                try:
                    yield c_read, c_write
                finally:
                    tg.cancel_scope.cancel()


async def invoke(server: Any, name: str, arguments: dict[str, Any]) -> Any:
    """What the runner does with a model's tool call: the framework's own path."""
    async with server:
        tools = {t.name: t for t in await server.list_tools()}
        context: RunContextWrapper[Any] = RunContextWrapper(context=None)
        return await MCPUtil.invoke_mcp_tool(server, tools[name], context, json.dumps(arguments))


def text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, default=str)


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "keyed"])
async def test_streamable_http_retry_on_an_isolated_session(with_keys: bool) -> None:
    app = make_app(auth=True)
    with lossy_http(app, Loss(drop=1)) as url:
        server = keyed(http_server(url)) if with_keys else http_server(url)
        sessions: list[int] = []
        hook = server._call_tool_with_session

        async def spy(session: Any, *args: Any) -> Any:
            sessions.append(id(getattr(session, "wrapped", session)))
            return await hook(session, *args)

        vars(server)["_call_tool_with_session"] = spy
        output = await invoke(server, "charge", {"amount": 5})
    assert len(sessions) == 2 and sessions[0] != sessions[1]  # the retry: an isolated session
    # The first attempt timed out (its answer lost), the framework retried on a new session.
    assert app.count("charge") == (1 if with_keys else 2)
    assert ("#1" if with_keys else "#2") in text(output)


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "keyed"])
async def test_run_with_retries_on_one_session(with_keys: bool) -> None:
    app = make_app()
    server = InProcess(app, Loss(drop=1))
    output = await invoke(keyed(server) if with_keys else server, "charge", {"amount": 5})
    assert app.count("charge") == (1 if with_keys else 2)
    assert ("#1" if with_keys else "#2") in text(output)


async def test_a_slow_tool_is_waited_out_not_run_again() -> None:
    # The first attempt times out while the tool still runs: the retry gets in_progress,
    # waited out inside the session, then the one execution's answer.
    app = make_app()
    server = keyed(InProcess(app, Loss(drop=0)))
    output = await invoke(server, "slow", {"seconds": 1.2})
    assert app.count("slow") == 1 and "slow done #1" in text(output)


async def test_each_logical_call_is_its_own_operation() -> None:
    app = make_app()
    server = keyed(InProcess(app, Loss(drop=0)))
    async with server:
        await server.call_tool("charge", {"amount": 1})
        await server.call_tool("charge", {"amount": 1})
    assert app.count("charge") == 2  # two calls, both answered: two operations


def test_a_changed_private_hook_is_refused() -> None:
    class Changed(MCPServerStreamableHttp):
        async def _call_tool_with_session(self, session: Any, name: str, args: Any) -> Any:  # type: ignore[override]
            raise AssertionError

    with pytest.raises(TypeError, match="changed its retry path"):
        keyed(Changed({"url": "http://127.0.0.1:1/mcp"}))


async def test_a_server_without_the_capability_is_refused() -> None:
    bare = App(server=_Server("forgot-install"), installation=None)  # type: ignore[arg-type]

    @bare.server.tool()
    def charge(amount: int) -> str:
        bare.runs.append(("charge", amount))
        return "charged"

    server = keyed(InProcess(bare, Loss(drop=0)))
    async with server:
        with pytest.raises(IdempotencyNotSupportedError):
            await server.call_tool("charge", {"amount": 1})
    assert bare.runs == []  # refused before anything was sent


async def test_published_retention_caps_the_window() -> None:
    app = make_app(advertise_tool_metadata=True)
    server = keyed(InProcess(app, Loss(drop=0)), window=10**6)
    async with server:
        await server.list_tools()
        assert server.session.retry_keys.limit("charge") == 86400  # type: ignore[union-attr]


async def test_outcome_unknown_is_not_resent_by_the_retry_loop(tmp_path: Any) -> None:
    """The stdio proxy's upstream dies mid-call (`idempotency_outcome_unknown`; the proxy exits
    too). `max_retry_attempts` would call again: the keyed operation raises the same
    `OutcomeUnknownError` without sending, and it reaches the caller."""
    import os

    from agents.mcp import MCPServerStdio

    from idemtools.client import OutcomeUnknownError
    from tests.proxy.helpers import ROOT, executions, proxy_argv, upstream_argv

    log = tmp_path / "log"
    argv = proxy_argv("--store", f"sqlite:///{tmp_path / 'p.db'}", upstream=upstream_argv(log))
    params = {
        "command": argv[0],
        "args": argv[1:],
        "env": {**os.environ, "PYTHONPATH": str(ROOT)},
        "cwd": str(ROOT),
    }
    server = keyed(
        MCPServerStdio(params, max_retry_attempts=2, retry_backoff_seconds_base=0.01)  # type: ignore[arg-type]
    )
    async with server:
        with pytest.raises(OutcomeUnknownError):
            await server.call_tool("die", {"label": "d"})
    assert executions(log, "d") == 1
