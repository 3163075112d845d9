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


class Bare:
    """Answers without `resultType` or a stamp in either era, as the independent TypeScript
    2026-07-28 servers do; or, `legacy_result_type`, writes `resultType` in 2025-11-25 too."""

    def __init__(self, legacy_result_type: bool = False) -> None:
        self.calls = 0
        self.legacy_result_type = legacy_result_type

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        self.calls += 1
        result: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
        if self.legacy_result_type:
            result["resultType"] = "complete"
        return {"jsonrpc": "2.0", "id": 1, "result": result}


def keyed_calls() -> tuple[KeyedCalls, Engine]:
    config = ProxyConfig()
    engine = Engine(from_url("memory://"), registry=Registry(), default_policy=config.default)
    return KeyedCalls(engine, config, ToolCatalog()), engine


async def test_a_replay_in_its_own_era_adds_nothing() -> None:
    keyed, engine = keyed_calls()
    keyed.server_info = STAMP  # a stamp is known, and still not added
    context = CallContext(transport="stdio")
    upstream = Bare()
    first = await keyed.answer(message(1, True), context, upstream)
    again = await keyed.answer(message(2, True), context, upstream)
    assert (
        again["result"]
        == first["result"]
        == {"content": [{"type": "text", "text": "ok"}], "isError": False}
    )
    legacy = await keyed.answer(message(3, False), context, upstream)
    assert legacy["result"] == first["result"]
    assert upstream.calls == 1
    await engine.aclose()


async def test_a_2025_record_with_result_type_keeps_it_in_its_era() -> None:
    keyed, engine = keyed_calls()
    context, upstream = CallContext(transport="stdio"), Bare(legacy_result_type=True)
    first = await keyed.answer(message(1, False), context, upstream)
    assert first["result"]["resultType"] == "complete"
    assert (await keyed.answer(message(2, False), context, upstream))["result"] == first["result"]
    await engine.aclose()


class Refusing:
    """Answers every tools/call with `text` as an `isError` result; counts tools/list."""

    def __init__(self, text: str, listed: tuple[str, ...] = ()) -> None:
        self.text, self.listed, self.lists = text, listed, 0

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        if method == "tools/list":
            self.lists += 1
            return {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"tools": [{"name": n} for n in self.listed]},
            }
        content = [{"type": "text", "text": self.text}]
        return {"jsonrpc": "2.0", "id": 1, "result": {"content": content, "isError": True}}


def call(rid: int, name: str, **arguments: Any) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "idempotencyKey": "k"}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def test_an_sdk_unknown_tool_answer_is_decided_without_the_listing() -> None:
    keyed, engine = keyed_calls()
    context, upstream = CallContext(transport="stdio"), Refusing("Unknown tool: t")
    for rid in (1, 2):  # other arguments under one key: no conflict, nothing was recorded
        answer = await keyed.answer(call(rid, "t", n=rid), context, upstream)
        assert answer["result"]["content"][0]["text"] == "Unknown tool: t"
    assert upstream.lists == 0
    await engine.aclose()


async def test_a_listed_tool_answering_like_an_unknown_one_is_recorded() -> None:
    keyed, engine = keyed_calls()
    context, upstream = CallContext(transport="stdio"), Refusing("Unknown tool: t", ("t",))
    assert not await keyed.catalog.unknown("t", upstream, None)  # the listing at hand has it
    await keyed.answer(call(1, "t", n=1), context, upstream)
    conflict = await keyed.answer(call(2, "t", n=2), context, upstream)
    assert conflict["error"]["data"]["type"] == "idempotency_key_conflict"
    await engine.aclose()


async def test_unlisted_names_are_remembered_bounded_and_for_a_while(monkeypatch: Any) -> None:
    from idemtools.proxy import keyed as module

    upstream, catalog = Refusing("x", ("t",)), ToolCatalog()
    assert await catalog.unknown("nope", upstream, None)
    assert await catalog.unknown("nope", upstream, None)
    assert upstream.lists == 1
    monkeypatch.setattr(module, "MIN_REFRESH", 0.0)
    monkeypatch.setattr(module, "MAX_MISSES", 3)
    for n in range(10):  # invented names: each one read again (no fresh listing), few kept
        assert await catalog.unknown(f"made-up-{n}", upstream, None)
    assert upstream.lists == 11 and len(catalog._misses) == 3
    monkeypatch.setattr(module, "MISS_TTL", 0.0)
    assert await catalog.unknown("nope", upstream, None)
    assert upstream.lists == 12  # expired: read again
