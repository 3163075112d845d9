"""The client helper logs keys as the digest the server logs, never raw."""

from __future__ import annotations

import logging

import pytest

from idemtools.client import RetryPolicy, call_tool
from idemtools.engine import key_digest

KEY = "order-2026-12-01-alice-7f3a"


async def test_retries_log_the_key_digest_not_the_key(caplog: pytest.LogCaptureFixture) -> None:
    attempts = 0

    async def lost_connection() -> object:
        nonlocal attempts
        attempts += 1
        raise ConnectionResetError("peer went away")

    policy = RetryPolicy(attempts=3, initial_delay=0, max_delay=0, timeout=1)
    with caplog.at_level(logging.INFO, logger="idemtools"), pytest.raises(ConnectionError):
        await call_tool(lost_connection, "charge", {"amount": 1}, idempotency_key=KEY, retry=policy)
    assert attempts == 3
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) == 2
    for line in retries:
        assert key_digest(KEY) in line
        assert KEY[:8] not in line and "key-hash" not in line


async def test_no_engine_log_line_carries_a_raw_key(caplog: pytest.LogCaptureFixture) -> None:
    from idemtools import CallContext, Engine, Outcome, Policy, Registry
    from idemtools.engine import ToolCall
    from idemtools.stores import MemoryStore

    class BrokenStore(MemoryStore):
        async def claim(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise OSError("store down")

    async def run() -> Outcome:
        raise RuntimeError("tool blew up")

    def deny(ctx: CallContext) -> None:
        raise PermissionError("no")

    local = CallContext(transport="stdio")
    engine = Engine(MemoryStore(), registry=Registry())
    with caplog.at_level(logging.DEBUG):
        for key, args, context, policy in [
            (KEY, {"a": 1}, local, Policy.of()),  # runs, and the tool raises
            (KEY, {"a": 2}, local, Policy.of()),  # conflict
            (KEY, {"a": 1}, CallContext(), Policy.of()),  # scope unavailable
            (KEY, {"a": 1}, local, Policy.of(authorize=deny)),  # unauthorized
            (KEY * 20, {"a": 1}, local, Policy.of()),  # key too long
        ]:
            await engine.handle(ToolCall("t", args, key, context, policy), run)
        await Engine(BrokenStore(), registry=Registry()).handle(  # type: ignore[arg-type]
            ToolCall("t", {}, KEY, local, Policy.of()), run
        )
    assert caplog.records  # something was logged
    assert KEY not in caplog.text and KEY[:8] not in caplog.text
    assert key_digest(KEY) in caplog.text
