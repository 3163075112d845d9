"""Real Redis and PostgreSQL for the tests: where they are, and what to do when they are not.

URLs come from `IDEMTOOLS_REDIS_URL` and `IDEMTOOLS_POSTGRES_URL` (defaults: the servers every
development and CI machine runs on 127.0.0.1). When a server does not answer, its tests are
skipped with a message naming the variable to set — unless `IDEMTOOLS_REQUIRE_SERVICES=1`
(`.ci/run` sets it), where an unreachable server fails the run: CI must never go green by
skipping the very tests that prove the shared stores.

`TcpProxy` is a plain TCP relay in front of a real server. Stopping it is how the outage tests
"take the server away" mid-run without stopping a server other people share; no Redis or
PostgreSQL behaviour is simulated.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

__all__ = [
    "POSTGRES_ENV",
    "REDIS_ENV",
    "REQUIRE_ENV",
    "RUN_ID",
    "TcpProxy",
    "need_postgres",
    "need_redis",
    "postgres_url",
    "redis_url",
    "with_port",
]

REDIS_ENV = "IDEMTOOLS_REDIS_URL"
POSTGRES_ENV = "IDEMTOOLS_POSTGRES_URL"
REQUIRE_ENV = "IDEMTOOLS_REQUIRE_SERVICES"

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

RUN_ID = uuid.uuid4().hex[:10]
"""Unique per test process: key prefixes and table names carry it, so runs never collide."""


def redis_url() -> str:
    return os.environ.get(REDIS_ENV) or DEFAULT_REDIS_URL


def postgres_url() -> str:
    return os.environ.get(POSTGRES_ENV) or DEFAULT_POSTGRES_URL


def services_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0", "false", "no")


@functools.cache
def _redis_problem(url: str) -> str | None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except Exception as exc:
        return repr(exc)
    finally:
        client.close()
    return None


@functools.cache
def _postgres_problem(url: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return repr(exc)
    return None


def _unreachable(what: str, env: str, url: str, problem: str) -> None:
    message = f"{what} at {url} is unreachable ({problem}); set {env} to a reachable server"
    if services_required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1: services are required)", pytrace=False)
    pytest.skip(message)


def need_redis() -> str:
    """The Redis URL to test against; skips (or fails, when required) if it does not answer."""
    url = redis_url()
    problem = _redis_problem(url)
    if problem is not None:
        _unreachable("Redis", REDIS_ENV, url, problem)
    return url


def need_postgres() -> str:
    """The PostgreSQL URL to test against; skips (or fails, when required) if unreachable."""
    url = postgres_url()
    problem = _postgres_problem(url)
    if problem is not None:
        _unreachable("PostgreSQL", POSTGRES_ENV, url, problem)
    return url


def with_port(url: str, host: str, port: int) -> str:
    """`url` with its host and port replaced (user, database and query kept)."""
    parts = urlsplit(url)
    netloc = f"{host}:{port}"
    if parts.username:
        auth = parts.username + (f":{parts.password}" if parts.password else "")
        netloc = f"{auth}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc))


def host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default_port


class TcpProxy:
    """A TCP relay on 127.0.0.1 to a real server; `stop()` cuts every connection, `start()`
    listens again on the same port. `delay` holds every chunk sent to the server that long
    (a slow network, so a request can be caught on its way). Runs in the test's event loop."""

    def __init__(self, target_host: str, target_port: int, *, delay: float = 0.0) -> None:
        self.target = (target_host, target_port)
        self.delay = delay  # seconds each chunk waits before it goes on to the server
        self.received = 0  # chunks read from clients so far: a test waits for its request
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await asyncio.sleep(0)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool
        ) -> None:
            try:
                while data := await src.read(65536):
                    if upstream:
                        self.received += 1
                    if upstream and self.delay:
                        await asyncio.sleep(self.delay)
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    async def wait_received(self, count: int, within: float = 10.0) -> None:
        """Until `count` chunks have come from clients (a request is in the relay); bounded."""
        deadline = time.monotonic() + within
        while self.received < count:
            assert time.monotonic() < deadline, "no request reached the relay"
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def proxy_to(url: str, default_port: int):  # type: ignore[no-untyped-def]
    """A started `TcpProxy` in front of `url`'s server, stopped at the end."""
    proxy = TcpProxy(*host_port(url, default_port))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


# -- stores and workers shared by test_redis.py and test_postgres.py ------------------------------
# Module-level functions, so that `multiprocessing` "spawn" children can import and run them.

SCOPE_VALUE = '["shared"]'
"""What `idemtools.scopes.shared` returns; the engine stores its SHA-256."""


def scope_hash() -> str:
    import hashlib

    return hashlib.sha256(SCOPE_VALUE.encode()).hexdigest()


def open_store(kind: str, url: str, name: str):  # type: ignore[no-untyped-def]
    """A store of `kind` on its own key prefix (Redis) or table (PostgreSQL) called `name`."""
    if kind == "redis":
        from idemtools.stores.redis import RedisStore

        return RedisStore.from_url(url, prefix=name)
    from idemtools.stores.postgres import PostgresStore

    return PostgresStore.from_url(url, table=name, min_size=1, max_size=4)


def race_worker(kind: str, url: str, name: str, idx: int, keys: list[str], barrier, queue) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(_race(kind, url, name, idx, keys, barrier, queue))


async def _race(kind: str, url: str, name: str, idx: int, keys: list[str], barrier, queue) -> None:  # type: ignore[no-untyped-def]
    import random

    store = open_store(kind, url, name)
    try:
        await store.get("race", "warm-up")  # connect before the barrier, not after it
        owner = f"p{idx}"
        barrier.wait(timeout=60)
        one = await store.claim("race", "one", "fp", owner, 60)
        order = list(keys)
        random.Random(idx).shuffle(order)
        barrier.wait(timeout=60)
        executed = []
        for key in order:
            claim = await store.claim("race", key, "fp", owner, 60)
            if claim.claimed:
                executed.append(key)  # "the tool ran" here
                done = await store.complete("race", key, owner, f'"{owner}:{key}"'.encode(), 120)
                assert done, key
        queue.put((idx, one.claimed, executed, None))
    except BaseException as exc:  # report, do not hang the parent
        queue.put((idx, False, [], repr(exc)))
    finally:
        await store.aclose()


def crash_worker(  # type: ignore[no-untyped-def]
    kind: str, url: str, name: str, key: str, lease: float, payments: str | None, ready
) -> None:
    """Run one keyed call through the Engine and hang in the middle of it, until SIGKILLed.

    With `payments` (PostgreSQL), the tool is transactional and has already written its
    side-effect row through `current_connection()` when it signals `ready`.
    """
    asyncio.run(_crash(kind, url, name, key, lease, payments, ready))


async def _crash(kind, url, name, key, lease, payments, ready) -> None:  # type: ignore[no-untyped-def]
    from idemtools.engine import Engine, ToolCall
    from idemtools.outcome import Outcome
    from idemtools.policy import Policy
    from idemtools.scopes import shared

    store = open_store(kind, url, name)
    policy = Policy.of(lease=lease, retention=60, scope=shared, transactional=bool(payments))

    async def run() -> Outcome:
        if payments:
            from psycopg import sql

            from idemtools.stores.postgres import current_connection

            await current_connection().execute(
                sql.SQL("INSERT INTO {} (key, amount) VALUES (%s, %s)").format(
                    sql.Identifier(payments)
                ),
                (key, 100),
            )
        ready.set()
        await asyncio.sleep(3600)  # killed here: after the side effect, before the record
        return Outcome(result={"content": [], "isError": False})

    await Engine(store).handle(
        ToolCall(name="pay", arguments={"amount": 100}, key=key, policy=policy), run
    )


# -- a private redis-server, for tests that need its configuration (maxmemory, policies) ----------


def need_redis_server() -> str:
    """The `redis-server` binary; skips (or fails, when services are required) without it."""
    import shutil

    binary = os.environ.get("IDEMTOOLS_REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed (or set IDEMTOOLS_REDIS_SERVER to its path)"
        if services_required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1: services are required)", pytrace=False)
        pytest.skip(message)
    return binary


@contextlib.contextmanager
def private_redis(*args: str):  # type: ignore[no-untyped-def]
    """Start a throwaway `redis-server` on a free 127.0.0.1 port (no persistence); yield its URL.

    Never the shared Redis: tests that need a small `maxmemory` or another eviction policy
    configure their own server, stopped (and gone with its data) at the end.
    """
    import shutil
    import socket
    import subprocess
    import tempfile
    import time

    import redis

    binary = need_redis_server()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Its own directory: a replica's full sync (or a SHUTDOWN) writes dump.rdb even with no
    # `save` points, and must not leave it in the checkout.
    directory = tempfile.mkdtemp(prefix="idemtools-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
    command += ["--save", "", "--appendonly"]
    proc = subprocess.Popen(
        [*command, "no", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"private redis-server did not start ({command})") from None
                time.sleep(0.02)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def filled_redis(url: str):  # type: ignore[no-untyped-def]
    """Fill a Redis with `noeviction` and a small `maxmemory` until it refuses writes (OOM).

    Large values first, then small ones: a refused large write frees its own buffer, so only
    small values bring the server to the very edge. The filling connection stays open inside
    the block: closing it frees its buffers, and the server would accept writes again.
    """
    import redis

    client = redis.Redis.from_url(url)
    try:
        for size in (10_000, 100, 1):
            for i in range(100_000):
                try:
                    client.set(f"fill:{size}:{i}", b"x" * size, ex=600)
                except redis.exceptions.OutOfMemoryError:
                    break
        yield
    finally:
        client.close()


# -- a private Redis Cluster (3 primaries, one replica each) --------------------------------------


def _cluster_ports(count: int) -> list[int]:
    """`count` free 127.0.0.1 ports whose cluster bus ports (port + 10000) are free too."""
    import random
    import socket

    rng = random.Random()
    ports: list[int] = []
    while len(ports) < count:
        port = rng.randrange(20000, 55535)
        if port in ports:
            continue
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        ports.append(port)
    return ports


class LocalCluster:
    """A throwaway Redis Cluster of `redis-server` processes on 127.0.0.1 (no persistence).

    Six nodes: three primaries, one replica each, `cluster-node-timeout` 1000 ms so a killed
    primary's replica takes over within seconds. `url` is the store URL of its first node.
    """

    def __init__(self, directory: str, *, node_timeout_ms: int = 1000) -> None:
        self.directory = directory
        self.node_timeout_ms = node_timeout_ms
        self.ports = _cluster_ports(6)
        self.procs: dict[int, Any] = {}

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}/0"

    @property
    def live_url(self) -> str:
        """A store URL through a node that is running: after a test killed a node (maybe the
        first), a new client must not start from it."""
        port = next(p for p in self.ports if p in self.procs and self.procs[p].poll() is None)
        return f"redis+cluster://127.0.0.1:{port}/0"

    def start_node(self, port: int) -> None:
        import subprocess

        binary = need_redis_server()
        self.procs[port] = subprocess.Popen(
            [
                binary,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"{self.directory}/nodes-{port}.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--dir", self.directory,
                "--save", "",
                "--appendonly", "no",
                "--repl-diskless-sync-delay", "0",  # a replica syncs at once, not after 5 s
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def start(self) -> None:
        import shutil
        import subprocess
        import time

        import redis

        for port in self.ports:
            self.start_node(port)
        deadline = time.monotonic() + 20
        for port in self.ports:
            client = redis.Redis(port=port, socket_connect_timeout=1)
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if self.procs[port].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"cluster node {port} did not start") from None
                    time.sleep(0.02)
            client.close()
        cli = shutil.which("redis-cli") or "redis-cli"
        subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{p}" for p in self.ports),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        self.wait_ok(deadline=time.monotonic() + 30)
        self.wait_replicas(deadline=time.monotonic() + 30)

    def wait_replicas(self, *, deadline: float, count: int = 3) -> None:
        """Until `count` live nodes are replicas whose link to their primary is up (synced)."""
        import time

        import redis

        while True:
            synced = 0
            for port, proc in self.procs.items():
                if proc.poll() is not None:
                    continue
                client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
                try:
                    info = client.info("replication")
                except redis.RedisError:
                    continue
                finally:
                    client.close()
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    synced += 1
            if synced >= count:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {synced} of {count} cluster replicas are in sync")
            time.sleep(0.05)

    def wait_ok(self, *, deadline: float, primaries: int = 3) -> None:
        """Until every live node reports cluster_state:ok and sees `primaries` serving slots."""
        import time

        import redis

        while True:
            ok = True
            for port, proc in self.procs.items():
                if proc.poll() is not None:
                    continue
                try:
                    client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
                    info = client.cluster("info")
                    nodes = client.cluster("nodes")
                    client.close()
                except redis.RedisError:
                    ok = False
                    break
                serving = sum(
                    1
                    for line in nodes.values()
                    if "master" in line["flags"] and "fail" not in line["flags"] and line["slots"]
                )
                if info.get("cluster_state") != "ok" or serving != primaries:
                    ok = False
                    break
            if ok:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not reach cluster_state:ok")
            time.sleep(0.05)

    def primary_of(self, key: bytes) -> int:
        """The port of the primary that serves `key`'s slot now."""
        import redis

        for port, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            client = redis.Redis(port=port, socket_connect_timeout=1, socket_timeout=1)
            try:
                slot = client.cluster("keyslot", key)
                for address, node in client.cluster("nodes").items():
                    if "master" in node["flags"] and "fail" not in node["flags"]:
                        for span in node["slots"]:
                            low, high = int(span[0]), int(span[-1])
                            if low <= slot <= high:
                                return int(address.rsplit(":", 1)[1].split("@")[0])
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise RuntimeError(f"no live primary serves {key!r}")

    def stop(self) -> None:
        import subprocess

        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- leaving the shared services as we found them ----------------------------------------------


def delete_redis_keys(prefix: str) -> None:
    """Delete every key under `prefix` on the shared Redis (a test module's records); quiet
    if Redis is gone."""
    import redis

    try:
        client = redis.Redis.from_url(redis_url(), socket_connect_timeout=2)
        for name in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(name)
        client.close()
    except redis.RedisError:
        pass


def drop_postgres_tables(prefix: str) -> None:
    """Drop every table whose name starts with `prefix` on the shared PostgreSQL; quiet if it
    is gone."""
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(postgres_url(), connect_timeout=2, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (prefix + "%",)
            ).fetchall()
            for (name,) in rows:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
    except psycopg.Error:
        pass
