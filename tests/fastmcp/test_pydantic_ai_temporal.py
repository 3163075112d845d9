"""pydantic-ai's TemporalAgent: its MCP tool-call activity, re-run, sends the same key.

`TemporalAgent` runs every MCP tool call in an activity of its own (`temporalize_mcp_toolset`'s
call-tool activity, built by pydantic-ai from the agent's `MCPToolset`). Here that very activity
is run by temporalio's `ActivityEnvironment`, with the `activity.Info` of a first attempt and
then of a retry (another attempt number, task token and start time, as a worker gets after a
crash), against a real idemtools server (FastMCP, in memory). With
`KeyedMCPToolset(key_for=activity_key_for)` the retry is answered from the record; another run
of the workflow is a new operation; a plain `MCPToolset` runs the tool on every attempt.
No Temporal server: the worker-crash proof on a dev server is tests/e2e/test_temporal.py's.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import dataclasses  # noqa: E402
from datetime import timedelta  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("pydantic_ai", reason="pydantic-ai is not installed (extra pydantic-ai)")
pytest.importorskip("temporalio", reason="temporalio is not installed (extra temporal)")

from pydantic_ai import RunContext  # noqa: E402
from pydantic_ai.durable_exec.temporal import TemporalRunContext  # noqa: E402
from pydantic_ai.durable_exec.temporal._mcp_toolset import temporalize_mcp_toolset  # noqa: E402
from pydantic_ai.durable_exec.temporal._toolset import CallToolParams  # noqa: E402
from pydantic_ai.mcp import MCPToolset  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.usage import RunUsage  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

from idemtools.integrations.pydantic_ai import KeyedMCPToolset  # noqa: E402
from idemtools.integrations.temporal import activity_key_for  # noqa: E402
from tests.fastmcp.lossy_shop import client_for, make_shop  # noqa: E402


def _call_tool_activity(toolset: Any) -> Any:
    """pydantic-ai's own call-tool activity for `toolset`, as TemporalAgent registers it."""
    durable = temporalize_mcp_toolset(
        toolset,
        activity_name_prefix="shop_agent",
        activity_config={"start_to_close_timeout": timedelta(seconds=10)},
        tool_activity_config={},
        deps_type=type(None),
    )
    (found,) = [f for f in durable.durable_registrations if f.__name__ == "call_tool_activity"]
    return found


async def _attempt(activity_fn: Any, toolset: Any, **info: Any) -> Any:
    """One attempt of the activity, with an `activity.Info` of its own."""
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    tools = await toolset.get_tools(ctx)
    params = CallToolParams(
        name="charge",
        tool_args={"amount": 5},
        serialized_run_context=TemporalRunContext.serialize_run_context(ctx),
        tool_def=tools["charge"].tool_def,
    )
    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), **info)
    return await env.run(activity_fn, params, None)


FIRST = {"attempt": 1, "task_token": b"first"}
RETRY = {"attempt": 2, "task_token": b"retry"}


@pytest.mark.parametrize("with_keys", [False, True], ids=["plain", "keyed"])
async def test_the_tool_call_activity_re_run_is_answered_from_the_record(with_keys: bool) -> None:
    shop = make_shop()
    async with client_for(shop, drop=0) as client:
        toolset = (
            KeyedMCPToolset(client, key_for=activity_key_for) if with_keys else MCPToolset(client)
        )
        activity_fn = _call_tool_activity(toolset)
        first = await _attempt(activity_fn, toolset, **FIRST)
        retry = await _attempt(activity_fn, toolset, **RETRY)
        assert shop.runs == (["charge"] if with_keys else ["charge", "charge"])
        assert (first == retry) == with_keys
        # Another run of the workflow (its activity id "1" again): a new operation.
        await _attempt(activity_fn, toolset, **FIRST, workflow_run_id="another-run")
        assert len(shop.runs) == (2 if with_keys else 3)


async def test_outside_an_activity_the_toolset_keeps_its_own_rule() -> None:
    shop = make_shop()
    async with client_for(shop, drop=0) as client:
        toolset = KeyedMCPToolset(client, key_for=activity_key_for)
        assert activity_key_for("charge", {"amount": 5}) is None
        ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
        tools = await toolset.get_tools(ctx)
        await toolset.call_tool("charge", {"amount": 5}, ctx, tools["charge"])
        await toolset.call_tool("charge", {"amount": 5}, ctx, tools["charge"])
    assert shop.runs == ["charge", "charge"]  # two answered calls: two operations
