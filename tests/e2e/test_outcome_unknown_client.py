"""`idempotency_outcome_unknown` on the client side, through the real stdio proxy.

The proxy answers it when its upstream died mid-call (tests/proxy/upstream.py's `die` tool: it
counts, then the process exits) and the proxy exits with it. Whether the side effect happened is
unknown for good. A framework's equal retry (a new proxy on the same store) must get the same
answer and run nothing: `KeyedSession` keeps the key and raises `OutcomeUnknownError`, which only
the application acts on (with a new key of its own). `call_tool` never retries it either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools.client import (
    KeyedSession,
    OutcomeUnknownError,
    RetryKeys,
    RetryPolicy,
    call_tool,
)
from idemtools.client.keyed_session import operation
from tests.proxy.helpers import ROOT, executions, proxy_argv, upstream_argv

pytestmark = pytest.mark.slow


def proxy(tmp_path: Path) -> StdioServerParameters:
    argv = proxy_argv(
        "--store", f"sqlite:///{tmp_path / 'proxy.db'}", upstream=upstream_argv(tmp_path / "log")
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(ROOT))


async def keyed_attempt(tmp_path: Path, keys: RetryKeys, **options: Any) -> BaseException:
    """One attempt on a fresh proxy process (the upstream dies, so does the proxy)."""
    with (tmp_path / "proxy.err").open("a") as errlog:
        async with (
            stdio_client(proxy(tmp_path), errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            keyed = KeyedSession(session, retry_keys=keys)
            try:
                await keyed.call_tool("die", {"label": "d"}, **options)
            except Exception as exc:
                return exc
    raise AssertionError("the call was answered")


def test_a_framework_retry_after_outcome_unknown_runs_nothing(tmp_path: Path) -> None:
    keys = RetryKeys()

    async def main() -> list[BaseException]:
        return [await keyed_attempt(tmp_path, keys) for _ in range(2)]

    first, retry = anyio.run(main)
    assert executions(tmp_path / "log", "d") == 1  # the retry got the same answer
    assert isinstance(first, OutcomeUnknownError) and isinstance(retry, OutcomeUnknownError)
    assert first.key == retry.key and first.key is not None
    assert len(keys) == 1  # the key is kept, not forgotten as a definite answer's


def test_an_operation_spanning_attempts_does_not_resend_it(tmp_path: Path) -> None:
    """A framework's loop inside one `operation()` (openai-agents' `keyed`): the second
    attempt raises the same error without sending anything."""
    keys = RetryKeys()

    async def main() -> list[BaseException]:
        errors: list[BaseException] = []
        with operation(keys, "die", {"label": "d"}):
            for _ in range(2):
                errors.append(await keyed_attempt(tmp_path, keys))
        return errors

    first, second = anyio.run(main)
    assert second is first
    assert executions(tmp_path / "log", "d") == 1


def test_call_tool_raises_it_and_does_not_retry(tmp_path: Path) -> None:
    async def main() -> BaseException:
        with (tmp_path / "proxy.err").open("a") as errlog:
            async with (
                stdio_client(proxy(tmp_path), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                try:
                    await call_tool(
                        session,
                        "die",
                        {"label": "d"},
                        idempotency_key="k-die",
                        retry=RetryPolicy(attempts=3, initial_delay=0.01),
                    )
                except Exception as exc:
                    return exc
        raise AssertionError("the call was answered")

    error = anyio.run(main)
    assert isinstance(error, OutcomeUnknownError) and error.key == "k-die"
    assert executions(tmp_path / "log", "d") == 1
