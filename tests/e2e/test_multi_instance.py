"""Three processes of the example server, stateless HTTP, one shared store.

Each instance is `examples/payments_server.py --http PORT --stateless` in its own OS process,
with `IDEMTOOLS_STORE` naming the same Redis or PostgreSQL. A client sends a keyed call to
instance 1, "loses" the answer, and retries on instances 2 and 3: exactly one execution in the
whole fleet, and every retry gets the same result object. A call still running on one instance
is reported in progress by the others.

Executions are counted by the example's own `ledger` tool, called unkeyed on every instance:
each process counts only its own executions, so the fleet's count is the sum.

Isolation: PostgreSQL runs in a schema of its own per run (`search_path` through the URL's
libpq `options`), dropped at the end. The example server takes no Redis key prefix, so Redis
runs use the default prefix with keys unique to the run, and delete exactly the records they
wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest

from tests.services import RUN_ID, need_postgres, need_redis

from .harness import ERAS, LEGACY, HttpWire, error_type, http_wire

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "payments_server.py"
WALKTHROUGH = ROOT / "examples" / "multi_instance.py"
ISSUER = "https://payments.example"  # what the example's demo token verifier reports
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


# -- the fleet ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "probe", "version": "0"},
        },
    }


@dataclass
class Instance:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"


def _start(store_url: str, log: Path) -> Instance:
    """One server process on a free port, answering; a port lost to a race is tried again."""
    env = {**os.environ, "IDEMTOOLS_STORE": store_url, "PYTHONUNBUFFERED": "1"}
    for _attempt in range(3):
        port = _free_port()
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(SERVER), "--http", str(port), "--stateless"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        instance = Instance(proc, f"http://127.0.0.1:{port}/mcp", log)
        if _wait_ready(instance):
            return instance
        _stop(instance)
        if b"address already in use" not in log.read_bytes():
            break
    raise RuntimeError(f"server did not start on {instance.url}:\n{instance.log_tail()}")


def _wait_ready(instance: Instance) -> bool:
    """True once the instance answers an authenticated initialize; False if it died or hung."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": "Bearer demo-probe",
    }
    deadline = time.monotonic() + START_TIMEOUT
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            if instance.proc.poll() is not None:
                return False
            try:
                reply = client.post(instance.url, headers=headers, json=_initialize())
                if reply.status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


def _stop(instance: Instance) -> None:
    proc = instance.proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def _scope_hash(caller: str) -> str:
    """The scope the example's `by_auth_subject` gives `Bearer demo-<caller>`, as stored."""
    from idemtools.scopes import AuthInfo, CallContext, by_auth_subject

    auth = AuthInfo(issuer=ISSUER, subject=caller, client_id=f"demo-{caller}")
    value = by_auth_subject(CallContext(transport="http", auth=auth))
    return hashlib.sha256(value.encode()).hexdigest()


@dataclass
class Fleet:
    kind: str
    store_url: str
    instances: list[Instance]
    used: list[tuple[str, str]] = field(default_factory=list)
    """(caller, key) of every keyed call sent, for cleanup."""
    _n: Iterator[int] = field(default_factory=itertools.count)

    @property
    def urls(self) -> list[str]:
        return [i.url for i in self.instances]

    def key(self, caller: str = "alice") -> str:
        key = f"mi-{RUN_ID}-{next(self._n)}"
        self.used.append((caller, key))
        return key

    def store(self) -> Any:
        from idemtools.stores import from_url

        return from_url(self.store_url)

    async def record(self, key: str, caller: str = "alice") -> Any:
        store = self.store()
        try:
            return await store.get(_scope_hash(caller), key)
        finally:
            await store.aclose()

    async def wait_for_record(self, key: str, *, polls: int = 200) -> Any:
        """Poll the shared store (another process writes it) until `key` has a record."""
        for _ in range(polls):  # 200 x 50 ms: bounded
            record = await self.record(key)
            if record is not None:
                return record
            await anyio.sleep(0.05)
        raise AssertionError(f"no record for {key!r} after {polls} polls")

    async def executions(self, era: str) -> list[int]:
        """Per instance: how many charges and transfers that process has executed."""
        counts = []
        for url in self.urls:
            async with http_wire(url, era, token="demo-auditor") as wire:
                reply = await wire.call({"name": "ledger", "arguments": {}})
            assert "result" in reply, reply
            counts.append(reply["result"]["structuredContent"]["charges"])
        return counts

    def dead(self) -> list[str]:
        return [f"{i.url}:\n{i.log_tail()}" for i in self.instances if i.proc.poll() is not None]


@contextlib.contextmanager
def _redis_store() -> Iterator[tuple[str, Any]]:
    url = need_redis()
    cleanups: list[Fleet] = []
    yield url, cleanups.append
    import redis

    from idemtools.stores.redis import RedisStore

    names = RedisStore.from_url(url)  # only for key_name(); never connects
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
    try:
        for fleet in cleanups:
            doomed = [names.key_name(_scope_hash(caller), key) for caller, key in fleet.used]
            if doomed:
                client.delete(*doomed)
    finally:
        client.close()


@contextlib.contextmanager
def _postgres_store() -> Iterator[tuple[str, Any]]:
    import psycopg

    from idemtools.stores import from_url

    url = need_postgres()
    schema = f"idem_mi_{RUN_ID}"
    options = quote(f"-csearch_path={schema}", safe="")
    scoped = f"{url}{'&' if '?' in url else '?'}options={options}"
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
    try:

        async def create() -> None:
            store = from_url(scoped)
            try:
                await store.create_schema()  # type: ignore[attr-defined]
            finally:
                await store.aclose()

        anyio.run(create)
        yield scoped, lambda fleet: None
    finally:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@contextlib.contextmanager
def _cluster_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """The session's private Redis Cluster (tests/conftest.py); gone with its records at the end."""
    cluster = request.getfixturevalue("redis_cluster")
    yield cluster.url, lambda fleet: None


@pytest.fixture(
    scope="module",
    params=["redis", "postgres", pytest.param("redis-cluster", marks=pytest.mark.cluster)],
)
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    """Three instances of the example server sharing one store; stopped even on failure."""
    kind: str = request.param
    tmp = tmp_path_factory.mktemp(f"fleet-{kind}")
    shared_store: Callable[[], Any] = {
        "redis": _redis_store,
        "postgres": _postgres_store,
        "redis-cluster": lambda: _cluster_store(request),
    }[kind]
    with shared_store() as (store_url, register):
        instances: list[Instance] = []
        try:
            for n in range(3):
                instances.append(_start(store_url, tmp / f"instance{n + 1}.log"))
            fleet = Fleet(kind, store_url, instances)
            register(fleet)
            yield fleet
            assert not fleet.dead(), f"an instance died during the tests: {fleet.dead()}"
        finally:
            for instance in instances:
                _stop(instance)


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@contextlib.asynccontextmanager
async def wires(fleet: Fleet, era: str, caller: str = "alice") -> AsyncIterator[list[HttpWire]]:
    async with contextlib.AsyncExitStack() as stack:
        opened = [
            await stack.enter_async_context(http_wire(url, era, token=f"demo-{caller}"))
            for url in fleet.urls
        ]
        yield opened


def _delta(before: list[int], after: list[int]) -> list[int]:
    return [b - a for a, b in zip(before, after, strict=True)]


# -- tests ----------------------------------------------------------------------------------------


async def test_every_instance_advertises_idempotency(fleet: Fleet, era: str) -> None:
    async with wires(fleet, era) as (one, two, three):
        for wire in (one, two, three):
            assert wire.initialize["capabilities"]["tools"]["idempotency"] == {}


async def test_lost_answer_retried_on_other_instances_executes_once(fleet: Fleet, era: str) -> None:
    key = fleet.key()
    params = {"name": "charge", "arguments": {"amount": 42}, "idempotencyKey": key}
    before = await fleet.executions(era)
    async with wires(fleet, era) as (one, two, three):
        lost = await one.call(params)  # the client never sees this answer
        second = await two.call(params)
        third = await three.call(params)
        fourth = await one.call(params)
    assert "result" in second, second
    assert second["result"]["isError"] is False
    assert "charged 42 usd" in second["result"]["content"][0]["text"]
    # Identical replays: the raw JSON result objects, whichever instance answers.
    assert third["result"] == second["result"]
    assert fourth["result"] == second["result"]
    assert lost["result"] == second["result"]
    # One execution in the whole fleet, on the instance that got the first call.
    assert _delta(before, await fleet.executions(era)) == [1, 0, 0]
    record = await fleet.record(key)
    assert record is not None and record.status.value == "completed", record


async def test_in_progress_is_seen_by_every_other_instance(fleet: Fleet, era: str) -> None:
    key = fleet.key()
    params = {
        "name": "slow_transfer",
        "arguments": {"amount": 7, "seconds": 3.0},
        "idempotencyKey": key,
    }
    before = await fleet.executions(era)
    first: dict[str, Any] = {}
    async with wires(fleet, era) as (one, two, three):
        async with anyio.create_task_group() as tg:

            async def original() -> None:
                first.update(await one.call(params))

            tg.start_soon(original)
            # Wait until instance 1 holds the claim in the shared store, so that the retries
            # below cannot be the first to claim (bounded: the tool runs 3 s).
            record = await fleet.wait_for_record(key)
            assert record.status.value == "in_progress", record
            busy_two = await two.call(params)
            busy_three = await three.call(params)
        after_two = await two.call(params)
        after_three = await three.call(params)
    assert error_type(busy_two) == "idempotency_key_in_progress", busy_two
    assert error_type(busy_three) == "idempotency_key_in_progress", busy_three
    assert "result" in first and first["result"]["isError"] is False, first
    assert after_two["result"] == first["result"]
    assert after_three["result"] == first["result"]
    assert _delta(before, await fleet.executions(era)) == [1, 0, 0]


async def test_conflict_is_seen_by_another_instance(fleet: Fleet, era: str) -> None:
    key = fleet.key()
    params = {"name": "charge", "arguments": {"amount": 5}, "idempotencyKey": key}
    before = await fleet.executions(era)
    async with wires(fleet, era) as (one, two, three):
        first = await one.call(params)
        other = await two.call({**params, "arguments": {"amount": 6}})
        again = await three.call(params)
    assert "result" in first, first
    assert error_type(other) == "idempotency_key_conflict", other
    assert again["result"] == first["result"]
    assert _delta(before, await fleet.executions(era)) == [1, 0, 0]


async def test_same_key_from_another_caller_is_its_own_call(fleet: Fleet, era: str) -> None:
    key = fleet.key("alice")
    fleet.used.append(("bob", key))
    params = {"name": "charge", "arguments": {"amount": 9}, "idempotencyKey": key}
    before = await fleet.executions(era)
    async with wires(fleet, era, "alice") as alice, wires(fleet, era, "bob") as bob:
        from_alice = await alice[0].call(params)
        from_bob = await bob[1].call(params)
        bob_again = await bob[2].call(params)
        alice_again = await alice[2].call(params)
    assert "result" in from_alice and "result" in from_bob
    assert bob_again["result"] == from_bob["result"]
    assert alice_again["result"] == from_alice["result"]
    assert _delta(before, await fleet.executions(era)) == [1, 1, 0]


def test_walkthrough_example_succeeds() -> None:
    """examples/multi_instance.py, as a user runs it: exit status 0 against the real Redis."""
    url = need_redis()
    done = subprocess.run(
        [sys.executable, str(WALKTHROUGH), "--redis", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "one execution" in done.stdout
