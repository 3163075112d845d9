"""Versioned records: releases share stores and outlive each other's records.

* A record this release cannot read (an unknown format version, an unknown kind) is refused as
  `idempotency_record_corrupt`; the tool never runs again.
* Mixed versions on one Redis: the package as it was before this change (commit `BASE`,
  extracted with `git archive` and imported in a subprocess) and this one. Records the old
  one wrote replay here byte for byte; records this one writes (a tombstone included) are
  never run again by the old one: it replays outcomes and refuses the tombstone as corrupt.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from idemtools.engine import Engine, ToolCall, _scope_hash
from idemtools.outcome import Outcome, is_tombstone, tombstone
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores import MemoryStore
from idemtools.stores.redis import RedisStore

from ..services import delete_redis_keys, need_redis

BASE = "8eef572"
"""The last commit before records were versioned (and tombstones existed)."""

ROOT = Path(__file__).resolve().parents[2]


def _call(key: str, arguments: dict[str, Any] | None = None) -> ToolCall:
    return ToolCall(
        name="pay", arguments=arguments or {}, key=key, policy=Policy(scope=shared, retention=600)
    )


def _scope(engine: Engine, call: ToolCall) -> str:
    key = cast(str, call.key)  # the raw key is `object`; these tests pass strings
    return _scope_hash(engine.policy_for(call.name, call.policy), call.context, key)


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
async def test_a_record_this_release_cannot_read_is_refused_never_run(stored: bytes) -> None:
    store = MemoryStore()
    engine = Engine(store)
    tool = _Tool()
    call = _call("k")
    scope = _scope(engine, call)
    from idemtools.canonical import fingerprint

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
    from idemtools.canonical import fingerprint

    scope = _scope(engine, call)
    assert (await store.claim(scope, "k", fingerprint("pay", {}), "someone", 60)).claimed
    assert await store.complete(scope, "k", "someone", tombstone(5_000_000), 600)
    answer = await engine.handle(call, tool)
    other = await engine.handle(_call("k", {"other": 1}), tool)
    assert answer.error is not None
    assert answer.error["data"] == {"type": "idempotency_outcome_not_kept", "idempotencyKey": "k"}
    assert other.error is not None and other.error["data"]["type"] == "idempotency_key_conflict"
    assert tool.runs == 0


# -- two releases on one Redis ----------------------------------------------------------------

# Run by the old package in a subprocess: `write` records outcomes through its engine; `read`
# answers every key through its engine with a tool that counts its runs. Prints JSON.
_OLD = r"""
import asyncio, json, sys
sys.meta_path[:] = [f for f in sys.meta_path
                    if not str(getattr(f, "__module__", "")).startswith("__editable__")]
sys.path.insert(0, sys.argv[1])
import idemtools
assert idemtools.__file__.startswith(sys.argv[1]), idemtools.__file__
from idemtools.engine import Engine, ToolCall, _scope_hash
from idemtools.outcome import Outcome
from idemtools.policy import Policy
from idemtools.scopes import shared
from idemtools.stores.redis import RedisStore

mode, url, prefix = sys.argv[2], sys.argv[3], sys.argv[4]
OUTCOMES = {
    "ok": Outcome(result={"content": [{"type": "text", "text": "paid \u00e9\ud83d\udd11"}],
                           "isError": False, "structuredContent": {"n": 1.5, "b": 2 ** 70}}),
    "is-error": Outcome(result={"content": [{"type": "text", "text": "no"}], "isError": True}),
    "rpc-error": Outcome.of_error(-32001, "upstream said no", {"why": [1, None, True]}),
    "exact": Outcome(result={"content": [], "big": 2 ** 80, "s": "\ud800"}),
}

async def main():
    store = RedisStore.from_url(url, prefix=prefix)
    engine = Engine(store)
    runs = {}
    out = {}
    try:
        for key in json.loads(sys.argv[5]):
            def tool(key=key):
                async def run():
                    runs[key] = runs.get(key, 0) + 1
                    return OUTCOMES.get(key, Outcome(result={"content": [], "ran": key}))
                return run
            call = ToolCall(name="pay", arguments={}, key=key,
                            policy=Policy(scope=shared, retention=600))
            answer = await engine.handle(call, tool())
            scope = _scope_hash(engine.policy_for("pay", call.policy), call.context, key)
            record = await store.get(scope, key)
            out[key] = {
                "answer": answer.to_bytes().decode("utf-8", "surrogatepass"),
                "record": None if record is None or record.outcome is None
                          else record.outcome.decode("utf-8", "surrogatepass"),
            }
    finally:
        await store.aclose()
    print(json.dumps({"runs": runs, "out": out}))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def old_package(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The `idemtools` package of commit `BASE`, extracted into a temporary directory."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", BASE, "idemtools"],
            capture_output=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(
            f"git history with commit {BASE} is unavailable ({exc}); cannot build the "
            "previous release for the mixed-version test"
        )
    target = tmp_path_factory.mktemp("old-idemtools")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return str(target)


def _old(old_package: str, mode: str, url: str, prefix: str, keys: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _OLD, old_package, mode, url, prefix, json.dumps(keys)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


OLD_KEYS = ["ok", "is-error", "rpc-error", "exact"]


@pytest.mark.services
async def test_old_and_new_releases_share_one_redis(old_package: str) -> None:
    url = need_redis()
    prefix = f"versions-{uuid.uuid4().hex[:8]}:"
    try:
        # 1. The old release records outcomes of every layout it writes.
        written = _old(old_package, "write", url, prefix, OLD_KEYS)
        assert written["runs"] == dict.fromkeys(OLD_KEYS, 1)

        # 2. This release replays each byte for byte, running nothing.
        store = RedisStore.from_url(url, prefix=prefix)
        engine = Engine(store)
        tool = _Tool()
        try:
            for key in OLD_KEYS:
                recorded = _b(written["out"][key]["record"])
                assert _b(written["out"][key]["answer"]) == recorded
                replay = await engine.handle(_call(key), tool)
                assert replay.to_bytes() == recorded, key
                record = await store.get(_scope(engine, _call(key)), key)
                assert record is not None and record.outcome == recorded  # untouched

            # 3. This release writes an outcome and a tombstone.
            new = await engine.handle(_call("new-ok"), tool)
            assert new.result is not None and tool.runs == 1
            from idemtools.canonical import fingerprint

            scope = _scope(engine, _call("new-gone"))
            assert (await store.claim(scope, "new-gone", fingerprint("pay", {}), "me", 60)).claimed
            assert await store.complete(scope, "new-gone", "me", tombstone(3_000_000), 600)
            gone = await engine.handle(_call("new-gone"), tool)
            assert gone.error is not None
            assert gone.error["data"]["type"] == "idempotency_outcome_not_kept"
        finally:
            await store.aclose()

        # 4. The old release never runs either again: it replays the outcome and, not knowing
        # the tombstone's version, refuses it as a corrupt record.
        read = _old(old_package, "read", url, prefix, ["new-ok", "new-gone", *OLD_KEYS])
        assert read["runs"] == {}, "the old release ran a call the new one had recorded"
        assert _b(read["out"]["new-ok"]["answer"]) == new.to_bytes()
        refused = json.loads(read["out"]["new-gone"]["answer"])
        assert refused["error"]["data"]["type"] == "idempotency_record_corrupt"
        assert is_tombstone(_b(read["out"]["new-gone"]["record"]))
        for key in OLD_KEYS:
            assert read["out"][key]["answer"] == written["out"][key]["record"]
    finally:
        delete_redis_keys(prefix)
