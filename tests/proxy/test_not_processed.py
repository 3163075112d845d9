"""The proxy's `upstream_unavailable` says `notProcessed` exactly when the request never left the
proxy; a call lost after it was sent is an outcome unknown (no hint), and a recorded upstream
error that carried the hint is replayed without it."""

from __future__ import annotations

from typing import Any

import pytest

from idemtools.engine import Engine
from idemtools.policy import Registry
from idemtools.proxy.config import ProxyConfig
from idemtools.proxy.faults import UpstreamLost, not_sent, unavailable_error
from idemtools.proxy.keyed import KeyedCalls, ToolCatalog
from idemtools.scopes import CallContext
from idemtools.stores import from_url


@pytest.mark.parametrize("sent", [False, True])
def test_unavailable_error_carries_it_only_when_not_sent(sent: bool) -> None:
    data = unavailable_error("gone", sent=sent)["data"]
    assert data["type"] == "upstream_unavailable"
    assert ("notProcessed" in data) is not sent
    assert data.get("notProcessed", True) is True
    assert not_sent("gone").error == unavailable_error("gone", sent=False)


class Lost:
    """An upstream that loses every request, before (`sent=False`) or after sending it."""

    def __init__(self, sent: bool) -> None:
        self.sent = sent

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        raise UpstreamLost("the upstream went away (test)", sent=self.sent)


class Refuses:
    """An upstream (another idemtools server, say) answering a refusal that carries the hint."""

    calls = 0

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        self.calls += 1
        data = {"type": "idempotency_key_in_progress", "retryAfterMs": 5, "notProcessed": True}
        return {"jsonrpc": "2.0", "id": 1, "error": {"code": -31051, "message": "m", "data": data}}


def call(rid: int) -> dict[str, Any]:
    params = {"name": "t", "arguments": {}, "idempotencyKey": "k"}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def keyed() -> tuple[KeyedCalls, Engine]:
    config = ProxyConfig()
    engine = Engine(from_url("memory://"), registry=Registry(), default_policy=config.default)
    return KeyedCalls(engine, config, ToolCatalog()), engine


async def test_a_keyed_call_never_sent_says_not_processed_and_is_not_recorded() -> None:
    calls, engine = keyed()
    context = CallContext(transport="stdio")
    for rid in (1, 2):  # not recorded: the retry is answered afresh, with the hint again
        answer = await calls.answer(call(rid), context, Lost(sent=False))
        assert answer["error"]["data"] == {"type": "upstream_unavailable", "notProcessed": True}
    await engine.aclose()


async def test_a_keyed_call_lost_after_sending_is_unknown_without_the_hint() -> None:
    calls, engine = keyed()
    context = CallContext(transport="stdio")
    first = await calls.answer(call(1), context, Lost(sent=True))
    again = await calls.answer(call(2), context, Lost(sent=True))
    for answer in (first, again):
        assert answer["error"]["data"]["type"] == "idempotency_outcome_unknown"
        assert "notProcessed" not in answer["error"]["data"]
    await engine.aclose()


async def test_a_recorded_upstream_refusal_is_replayed_without_the_hint() -> None:
    calls, engine = keyed()
    context, upstream = CallContext(transport="stdio"), Refuses()
    first = await calls.answer(call(1), context, upstream)
    again = await calls.answer(call(2), context, upstream)
    assert first["error"]["data"]["notProcessed"] is True  # the upstream's own answer, relayed
    assert "notProcessed" not in again["error"]["data"]  # a replay had an effect: the record
    assert again["error"]["data"]["type"] == "idempotency_key_in_progress"
    assert upstream.calls == 1
    await engine.aclose()
