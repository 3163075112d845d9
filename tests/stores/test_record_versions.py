"""Versioned records: stores keep a record's bytes as they are, so the version is the format's.

* A record of an unknown format version or an unknown kind is refused as
  `idempotency_record_corrupt`; the tool never runs again.
* Records of format versions 1 and 2 (`records_v1_v2.json`: the stored outcomes, and on Redis
  the hash and its key name, as a writer that knows only those versions stores them) replay
  here byte for byte, on any store and in place on Redis.
* A reader that knows only versions 1 and 2 (`_read_v1_v2`, below) reads every outcome written
  here, and refuses a tombstone (version 3) as corrupt rather than running the call again.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, cast

import orjson
import pytest

from idemtools.canonical import fingerprint
from idemtools.engine import Engine, ToolCall
from idemtools.engine.decision import scope_hash
from idemtools.outcome import Outcome, is_tombstone, tombstone
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores import MemoryStore
from idemtools.stores.redis import RedisStore

from ..services import delete_redis_keys, need_redis

RECORDS_V1_V2 = json.loads(
    Path(__file__).with_name("records_v1_v2.json").read_text(encoding="utf-8")
)
"""Completed records of format versions 1 and 2; the file's `about` says what each field is."""


def _call(key: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(
        name="pay", arguments=arguments or {}, key=key, policy=Policy(scope=shared, retention=600)
    )


def _scope(engine: Engine, call: ToolCall) -> str:
    key = cast(str, call.key)  # the raw key is `object`; these tests pass strings
    return scope_hash(engine.policy_for(call.name, call.policy), call.context, key)


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _read_v1_v2(data: bytes) -> dict[str, Any]:
    """The outcome reader of a format that has versions 1 and 2 only: the result or error
    object it replays; ValueError for anything else (the engine answers it as corrupt)."""
    try:
        body = json.loads(data) if data.startswith(b'{"v":2,') else orjson.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(body, dict) or body.get("v") not in (1, 2):
        raise ValueError("unknown layout")
    result, error = body.get("result"), body.get("error")
    if isinstance(result, dict) and error is None:
        return {"result": result}
    if (
        isinstance(error, dict)
        and result is None
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
    ):
        return {"error": error}
    raise ValueError("neither a result nor an error")


class _Tool:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> Outcome:
        self.runs += 1
        return Outcome(result={"content": [{"type": "text", "text": "ran"}]})


@pytest.mark.parametrize(
    "stored",
    [
        b'{"v":4,"result":{"content":[]}}',  # a later format version
        b'{"v":3,"kind":"something_new"}',  # a later kind of this version
        b'{"v":3}',
        b'{"v":0,"result":{}}',
        b'{"result":{}}',
        b"not json",
    ],
)
async def test_a_record_of_an_unknown_version_or_kind_is_refused_never_run(stored: bytes) -> None:
    store = MemoryStore()
    engine = Engine(store)
    tool = _Tool()
    call = _call("k")
    scope = _scope(engine, call)

    assert (await store.claim(scope, "k", fingerprint("pay", {}), "someone", 60)).claimed
    assert await store.complete(scope, "k", "someone", stored, 600)
    answer = await engine.handle(call, tool)
    assert answer.error is not None
    assert answer.error["data"]["type"] == "idempotency_record_corrupt"
    assert tool.runs == 0


async def test_a_tombstone_is_refused_as_not_kept_with_the_key() -> None:
    store = MemoryStore()
    engine = Engine(store)
    tool = _Tool()
    call = _call("k")

    scope = _scope(engine, call)
    assert (await store.claim(scope, "k", fingerprint("pay", {}), "someone", 60)).claimed
    assert await store.complete(scope, "k", "someone", tombstone(5_000_000), 600)
    answer = await engine.handle(call, tool)
    other = await engine.handle(_call("k", {"other": 1}), tool)
    assert answer.error is not None
    assert answer.error["data"] == {"type": "idempotency_outcome_not_kept", "idempotencyKey": "k"}
    assert other.error is not None and other.error["data"]["type"] == "idempotency_key_conflict"
    assert tool.runs == 0


# -- format versions 1 and 2 -------------------------------------------------------------------


def test_the_records_cover_both_versions_results_and_errors() -> None:
    assert RECORDS_V1_V2["fingerprint"] == fingerprint(RECORDS_V1_V2["tool"], {})
    stored = [_b(r["outcome"]) for r in RECORDS_V1_V2["records"]]
    assert {json.loads(s)["v"] for s in stored} == {1, 2}
    assert {next(iter(_read_v1_v2(s))) for s in stored} == {"result", "error"}
    assert any(not s.isascii() for s in stored)  # raw UTF-8, as orjson writes version 1


@pytest.mark.parametrize("record", RECORDS_V1_V2["records"], ids=lambda r: r["key"])
async def test_a_v1_or_v2_record_replays_byte_for_byte(record: dict[str, str]) -> None:
    store = MemoryStore()
    engine = Engine(store)
    tool = _Tool()
    key, stored = record["key"], _b(record["outcome"])
    scope = _scope(engine, _call(key))
    owner, fp = record["owner"], RECORDS_V1_V2["fingerprint"]
    assert (await store.claim(scope, key, fp, owner, 60)).claimed
    assert await store.complete(scope, key, owner, stored, 600)

    replay = await engine.handle(_call(key), tool)
    assert replay.to_bytes() == stored
    assert tool.runs == 0
    # Written again, the same outcome takes the same bytes: versions 1 and 2 are what outcomes
    # are written as, so a reader of those versions alone reads them.
    assert Outcome.from_bytes(stored).to_bytes() == stored
    assert _read_v1_v2(stored) == _read_v1_v2(replay.to_bytes())


def test_a_v1_v2_reader_reads_outcomes_written_here_and_refuses_a_tombstone() -> None:
    for outcome in [
        Outcome(result={"content": [{"type": "text", "text": "paid é"}]}),
        Outcome(result={"content": [], "big": 2**80, "s": "\ud800"}),
        Outcome(result={"content": [], "isError": True}),
        Outcome.of_error(-32001, "upstream said no", {"why": [1, None, True]}),
    ]:
        expected = {"result": outcome.result} if outcome.error is None else {"error": outcome.error}
        assert _read_v1_v2(outcome.to_bytes()) == expected
    with pytest.raises(ValueError, match="unknown layout"):
        _read_v1_v2(tombstone(3_000_000))


@pytest.mark.services
async def test_v1_and_v2_records_on_redis_replay_in_place() -> None:
    url = need_redis()
    prefix = f"versions-{uuid.uuid4().hex[:8]}:"
    store = RedisStore.from_url(url, prefix=prefix)
    engine = Engine(store)
    tool = _Tool()
    try:
        # 1. The hashes, at their key names, as a writer of versions 1 and 2 leaves them.
        for record in RECORDS_V1_V2["records"]:
            name = _b(prefix + record["redis_name"])
            assert store.key_name(_scope(engine, _call(record["key"])), record["key"]) == name
            await store.client.hset(
                name,
                mapping={
                    "s": "c",
                    "f": RECORDS_V1_V2["fingerprint"],
                    "o": record["owner"],
                    "v": _b(record["outcome"]),
                },
            )
            await store.client.pexpire(name, 600_000)

        # 2. Each replays byte for byte, runs nothing, and stays as it was.
        for record in RECORDS_V1_V2["records"]:
            key, stored = record["key"], _b(record["outcome"])
            before = await store.client.hgetall(_b(prefix + record["redis_name"]))
            replay = await engine.handle(_call(key), tool)
            assert replay.to_bytes() == stored, key
            assert await store.client.hgetall(_b(prefix + record["redis_name"])) == before
        assert tool.runs == 0

        # 3. An outcome and a tombstone written here: the fields a reader of versions 1 and 2
        # reads (s, f, o, v) mean what they meant; it replays the outcome and refuses the
        # tombstone as corrupt, so neither call runs again.
        new = await engine.handle(_call("new-ok"), tool)
        assert new.result is not None and tool.runs == 1
        scope = _scope(engine, _call("new-gone"))
        assert (await store.claim(scope, "new-gone", fingerprint("pay", {}), "me", 60)).claimed
        assert await store.complete(scope, "new-gone", "me", tombstone(3_000_000), 600)
        gone = await engine.handle(_call("new-gone"), tool)
        assert gone.error is not None
        assert gone.error["data"]["type"] == "idempotency_outcome_not_kept"

        ok = await store.client.hgetall(store.key_name(_scope(engine, _call("new-ok")), "new-ok"))
        assert (ok[b"s"], ok[b"f"]) == (b"c", RECORDS_V1_V2["fingerprint"].encode())
        assert ok[b"v"] == new.to_bytes()
        assert _read_v1_v2(ok[b"v"]) == {"result": new.result}
        dead = await store.client.hgetall(store.key_name(scope, "new-gone"))
        kept = dead[b"v"]
        assert isinstance(kept, bytes)
        assert (dead[b"s"], dead[b"o"]) == (b"c", b"me") and is_tombstone(kept)
        with pytest.raises(ValueError):
            _read_v1_v2(kept)
    finally:
        await store.aclose()
        delete_redis_keys(prefix)
