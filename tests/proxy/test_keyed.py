"""The keyed-call path in-process: a replay fits the era of the request replaying it."""

from __future__ import annotations

from typing import Any

from idemtools.engine import Engine
from idemtools.policy import Registry
from idemtools.proxy.config import ProxyConfig
from idemtools.proxy.keyed import SERVER_INFO_META_KEY, KeyedCalls, ToolCatalog
from idemtools.scopes import CallContext
from idemtools.stores import from_url

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
STAMP = {"name": "up", "version": "1"}


class Upstream:
    """Answers like a 2026-07-28 server (or a 2025-11-25 one); counts executions."""

    def __init__(self) -> None:
        self.calls = 0

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        self.calls += 1
        result: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
        if "_meta" in params:
            result["resultType"] = "complete"
            result["_meta"] = {SERVER_INFO_META_KEY: STAMP}
        return {"jsonrpc": "2.0", "id": 1, "result": result}


def message(rid: int, modern: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "t", "arguments": {}, "idempotencyKey": "k"}
    if modern:
        params["_meta"] = MODERN
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def test_a_replay_is_re_enveloped_for_the_other_era() -> None:
    config = ProxyConfig()
    engine = Engine(from_url("memory://"), registry=Registry(), default_policy=config.default)
    keyed = KeyedCalls(engine, config, ToolCatalog())
    upstream, context = Upstream(), CallContext(transport="stdio")
    first = await keyed.answer(message(1, True), context, upstream)
    assert first["result"]["resultType"] == "complete"
    legacy = await keyed.answer(message(2, False), context, upstream)
    assert "resultType" not in legacy["result"] and "_meta" not in legacy["result"]
    again = await keyed.answer(message(3, True), context, upstream)
    assert again["result"] == first["result"] and again["id"] == 3
    assert upstream.calls == 1
    await engine.aclose()


async def test_a_legacy_record_replayed_in_2026_gets_result_type_and_the_stamp() -> None:
    config = ProxyConfig()
    engine = Engine(from_url("memory://"), registry=Registry(), default_policy=config.default)
    keyed = KeyedCalls(engine, config, ToolCatalog())
    upstream, context = Upstream(), CallContext(transport="stdio")
    keyed.server_info = STAMP  # learned from an earlier 2026-07-28 answer
    legacy = await keyed.answer(message(1, False), context, upstream)
    modern = await keyed.answer(message(2, True), context, upstream)
    assert modern["result"] == {
        **legacy["result"],
        "resultType": "complete",
        "_meta": {SERVER_INFO_META_KEY: STAMP},
    }
    assert upstream.calls == 1
    await engine.aclose()
