"""`error.data.notProcessed` is a hint for clients, never a reason to retry: a definite answer that
carries it is raised at once under the same key (`call_tool`), an equal call after it is a new
operation with a new key (`KeyedSession`), and classification reads `data.type` alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemtools.client import RetryPolicy, call_tool
from idemtools.client.keyed_session import KeyedSession, classify
from idemtools.errors import ConflictError

from .harness import LINE, make_app
from .lossy import Loss, lossy_session
from .test_client import session_for
from .test_keyed_session import SDK_ERROR, _rpc  # type: ignore[attr-defined]

RETRYING = RetryPolicy(attempts=4, initial_delay=0.01, max_delay=0.02)
TYPES = [
    "idempotency_key_in_progress",
    "idempotency_key_conflict",
    "idempotency_key_invalid",
    "idempotency_arguments_invalid",
    "idempotency_scope_unavailable",
    "idempotency_unauthorized",
    "idempotency_quota_exceeded",
    "idempotency_store_full",
    "idempotency_store_unavailable",
    "idempotency_outcome_unknown",
    "idempotency_outcome_not_kept",
    "idempotency_outcome_too_large",
    "idempotency_record_corrupt",
    "upstream_unavailable",
    None,
]


@given(
    st.sampled_from(TYPES),
    st.sampled_from([-32603, -32602, -32042, -32001, -32000, -32800, -31051, 408]),
    st.booleans(),
    st.sampled_from([True, False, "yes", 1]),
)
def test_classification_never_reads_the_hint(
    kind: str | None, code: int, answered: bool, hint: object
) -> None:
    data: dict[str, Any] = {} if kind is None else {"type": kind}
    plain = classify(_rpc(code, dict(data)), answered=answered)
    assert classify(_rpc(code, {**data, "notProcessed": hint}), answered=answered) == plain


async def test_a_conflict_carrying_the_hint_is_raised_at_once() -> None:
    app = make_app()
    async with session_for(app) as session:
        await call_tool(session, "charge", {"amount": 1}, idempotency_key="np-k")
        with pytest.raises(ConflictError) as refused:
            await call_tool(
                session, "charge", {"amount": 2}, idempotency_key="np-k", retry=RETRYING
            )
    assert refused.value.not_processed is True  # the server said so; the client still stops
    assert app.count("charge") == 1


def _hinting_tool(app: Any) -> None:
    from mcp.shared.exceptions import MCPError  # type: ignore[attr-defined]  # mcp 2.x only

    @app.server.tool()
    async def busy(x: int) -> str:
        app.runs.append(("busy", x))
        raise MCPError(code=-32042, message="busy", data={"notProcessed": True})


@pytest.mark.skipif(LINE != 2, reason="JSON-RPC errors from a tool exist on mcp 2.x")
async def test_a_tools_error_carrying_the_hint_is_not_retried_under_its_key() -> None:
    app = make_app()
    _hinting_tool(app)
    async with session_for(app) as session:
        with pytest.raises(SDK_ERROR) as raised:
            await call_tool(session, "busy", {"x": 1}, idempotency_key="np-t", retry=RETRYING)
    assert raised.value.error.data == {"notProcessed": True}
    assert app.count("busy") == 1  # one attempt: a definite answer, whatever its hint


@pytest.mark.skipif(LINE != 2, reason="JSON-RPC errors from a tool exist on mcp 2.x")
async def test_after_a_definite_answer_carrying_the_hint_an_equal_call_gets_a_new_key() -> None:
    app = make_app()
    _hinting_tool(app)
    async with lossy_session(app.server, Loss(drop=0)) as session:
        keyed = KeyedSession(session)
        for _ in range(2):
            with pytest.raises(SDK_ERROR):
                await keyed.call_tool("busy", {"x": 1})
        assert len(keyed.retry_keys) == 0  # no key kept for a retry
    assert app.count("busy") == 2  # two operations: the second was no replay of the first
