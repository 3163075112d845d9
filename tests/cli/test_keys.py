"""`idemtools keys show|release` against records a real engine wrote.

The command runs as an operator runs it: a child process, a store URL, the raw key and the
scope as the server's log shows it (the scope hash) or as a strategy spells it (`shared`, the
JSON value). SQLite files and a real Redis (its own key prefix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from idemtools import Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall, key_digest
from idemtools.engine.decision import scope_hash
from idemtools.policy import LapsedCall
from idemtools.scopes import CallContext
from idemtools.stores import from_url
from idemtools.stores.base import Status
from tests.services import (
    RUN_ID,
    delete_redis_keys,
    drop_postgres_tables,
    need_postgres,
    need_redis,
)

pytestmark = pytest.mark.sdk_free

SECRET = "card 4242 charged"  # the outcome's content: never shown unless asked
POLICY = Policy.of(retention=60, lease=30, scope=shared)
SCOPE = scope_hash(POLICY, CallContext(), "k")
ROOT = Path(__file__).resolve().parents[2]


def keys(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "idemtools.cli", "keys", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def akeys(*args: str) -> subprocess.CompletedProcess[str]:
    return await anyio.to_thread.run_sync(lambda: keys(*args))


class Tool:
    def __init__(self, *, hang: bool = False) -> None:
        self.calls = 0
        self.hang = hang
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self) -> Outcome:
        self.calls += 1
        self.started.set()
        if self.hang and self.calls == 1:
            await self.release.wait()
        return Outcome(result={"content": [{"type": "text", "text": SECRET}], "isError": False})


def call(key: str) -> ToolCall:
    return ToolCall(name="charge", arguments={"amount": 1}, key=key, policy=POLICY)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("redis", marks=pytest.mark.services),
        pytest.param("postgres", marks=pytest.mark.services),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'records.db'}"
        return
    if request.param == "postgres":
        from idemtools.stores.postgres import PostgresStore

        table = f"idemtools_keys_{RUN_ID}_{uuid.uuid4().hex[:6]}"
        url = need_postgres()

        async def create() -> None:
            store = PostgresStore.from_url(url, table=table)
            await store.create_schema()
            await store.aclose()

        anyio.run(create)
        yield f"{url}?table={table}"
        drop_postgres_tables(table)
        return
    prefix = f"idemtools-test:{RUN_ID}:keys:{uuid.uuid4().hex[:6]}:"
    yield f"{need_redis()}?prefix={prefix}"
    delete_redis_keys(prefix)


async def test_show_a_completed_record_never_prints_its_outcome_unless_asked(
    store_url: str,
) -> None:
    engine = Engine(from_url(store_url), registry=Registry())
    assert (await engine.handle(call("k"), Tool())).error is None
    await engine.aclose()

    shown = await akeys("show", store_url, "--key", "k", "--scope", "shared")
    assert shown.returncode == 0, shown.stderr
    assert "state: completed" in shown.stdout
    assert f"key_digest: {key_digest('k')}" in shown.stdout
    assert f"scope: {SCOPE}" in shown.stdout
    assert "age_seconds: " in shown.stdout and "expires_in_seconds: " in shown.stdout
    assert "content not shown" in shown.stdout
    assert SECRET not in shown.stdout + shown.stderr

    # The same record by its scope hash (as logged) and by its JSON scope value.
    for scope in (SCOPE, '[ "shared" ]'):
        as_json = await akeys("show", store_url, "--key", "k", "--scope", scope, "--json")
        assert as_json.returncode == 0, as_json.stderr
        data = json.loads(as_json.stdout)
        assert data["state"] == "completed" and data["scope"] == SCOPE
        assert 0 <= data["age_seconds"] < 30 and 0 < data["expires_in_seconds"] <= 60
        assert "outcome" not in data
    asked = await akeys("show", store_url, "--key", "k", "--scope", "shared", "--outcome")
    assert asked.returncode == 0 and SECRET in asked.stdout

    missing = await akeys("show", store_url, "--key", "other", "--scope", "shared")
    assert missing.returncode == 1 and "no live record" in missing.stdout


async def test_release_frees_a_hung_key_fenced_by_owner(store_url: str) -> None:
    # A tool hangs on one instance; the operator sees its record, releases it, and a retry
    # on another instance runs at once instead of waiting out the lease.
    hung = Engine(from_url(store_url), registry=Registry())
    other = Engine(from_url(store_url), registry=Registry())
    tool = Tool(hang=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(hung.handle, call("k"), tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        try:
            with anyio.fail_after(10):
                await tool.started.wait()
            shown = await akeys("show", store_url, "--key", "k", "--scope", "shared", "--json")
            assert shown.returncode == 0, shown.stderr
            record = json.loads(shown.stdout)
            assert record["state"] == "in_progress" and record["age_seconds"] < 30
            busy = await other.handle(call("k"), tool)
            assert busy.error is not None
            assert busy.error["data"]["type"] == "idempotency_key_in_progress"

            wrong = await akeys(
                "release", store_url, "--key", "k", "--scope", "shared", "--owner", "0" * 32
            )
            assert wrong.returncode == 1 and "not released" in wrong.stderr
            freed = await akeys(
                "release", store_url, "--key", "k", "--scope", SCOPE, "--owner", record["owner"]
            )
            assert freed.returncode == 0, freed.stderr
            assert "released (in_progress" in freed.stdout
            assert "WARNING operator released" in freed.stderr
            assert f"key_digest={key_digest('k')}" in freed.stderr

            retry = await other.handle(call("k"), tool)
            assert retry.error is None and tool.calls == 2, "the retry ran at once"
        finally:
            tool.release.set()
    await hung.aclose()
    await other.aclose()


async def test_release_refuses_a_completed_record_unless_forced(store_url: str) -> None:
    engine = Engine(from_url(store_url), registry=Registry())
    tool = Tool()
    assert (await engine.handle(call("k"), tool)).error is None

    refused = await akeys("release", store_url, "--key", "k", "--scope", "shared")
    assert refused.returncode == 1 and "--force" in refused.stderr
    kept = await engine.store.get(SCOPE, "k")
    assert kept is not None and kept.status is Status.COMPLETED
    assert (await engine.handle(call("k"), tool)).replayed

    forced = await akeys("release", store_url, "--key", "k", "--scope", "shared", "--force")
    assert forced.returncode == 0, forced.stderr
    assert "(forced)" in forced.stderr
    assert await engine.store.get(SCOPE, "k") is None
    again = await engine.handle(call("k"), tool)
    assert not again.replayed and tool.calls == 2
    await engine.aclose()


async def test_release_frees_a_lapsed_claim_so_a_retry_runs_again(store_url: str) -> None:
    # A process died inside the tool (its engine stops renewing), and the reconcile of every
    # retry fails (the provider is down): each retry is answered idempotency_outcome_unknown
    # and the claim stays lapsed for the retention. The operator, having checked that nothing
    # was charged, releases it; the next retry runs the tool.
    lease = 0.5
    asked = 0

    async def reconcile(call: LapsedCall) -> Outcome | None:
        nonlocal asked
        asked += 1
        raise ConnectionError("the provider is down")

    policy = Policy.of(retention=600, lease=lease, scope=shared, on_lapse=reconcile)
    charge = ToolCall(name="charge", arguments={"amount": 1}, key="k", policy=policy)
    dead = Engine(from_url(store_url), registry=Registry())
    retrying = Engine(from_url(store_url), registry=Registry())
    tool = Tool(hang=True)
    async with anyio.create_task_group() as tg:
        tg.start_soon(dead.handle, charge, tool)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        try:
            with anyio.fail_after(10):
                await tool.started.wait()
            dead.keeper.close()  # no more renewals: to the store, its process has died
            await anyio.sleep(lease * 3)
            for _ in range(2):
                unknown = await retrying.handle(charge, tool)
                assert unknown.error is not None, unknown
                assert unknown.error["data"]["type"] == "idempotency_outcome_unknown"
            assert asked == 2 and tool.calls == 1

            shown = await akeys("show", store_url, "--key", "k", "--scope", "shared", "--json")
            assert shown.returncode == 0, shown.stderr
            record = json.loads(shown.stdout)
            assert record["state"] == "lapsed" and record["lapsed_at"] is not None, record
            assert record["expires_in_seconds"] > 60

            wrong = await akeys(
                "release", store_url, "--key", "k", "--scope", "shared", "--owner", "0" * 32
            )
            assert wrong.returncode == 1 and "not released" in wrong.stderr
            freed = await akeys("release", store_url, "--key", "k", "--scope", "shared")
            assert freed.returncode == 0, freed.stdout + freed.stderr
            assert f"released (lapsed, owner {record['owner']})" in freed.stdout
            assert "runs the tool again" in freed.stdout
            assert "WARNING operator released" in freed.stderr and "state=lapsed" in freed.stderr
            assert await retrying.store.get(SCOPE, "k") is None

            again = await retrying.handle(charge, tool)
            assert again.error is None and tool.calls == 2, again
            assert asked == 2, "a free key: nothing to reconcile"
            assert (await retrying.handle(charge, tool)).replayed
        finally:
            tool.release.set()
            tg.cancel_scope.cancel()
    await retrying.aclose()
    await dead.aclose()


def test_a_bad_scope_is_a_usage_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    for scope in ("by_auth_subject", "[not json", '{"a": 1}'):
        done = keys("show", url, "--key", "k", "--scope", scope)
        assert done.returncode == 2 and "--scope" in done.stderr, done.stderr


def test_an_unreachable_store_is_one_line_without_the_password() -> None:
    done = keys("show", "redis://:hunter2@127.0.0.1:1/0", "--key", "k", "--scope", "shared")
    assert done.returncode == 1
    assert done.stderr.startswith("idemtools: error: the store failed:")
    assert "Traceback" not in done.stderr and "hunter2" not in done.stderr
