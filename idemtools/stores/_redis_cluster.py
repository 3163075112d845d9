"""Redis Cluster plumbing for `RedisStore`: the client, its limits, the lease keeper's clone, WAIT.

Kept apart from `redis.py` so the single-server hot path stays as it is; `RedisStore` calls in
here only when its client is a `redis.asyncio.RedisCluster`, or when `wait_replicas` is set.

What a Cluster needs that one Redis does not (each measured under load on a local 3-primary,
3-replica cluster, tests/stores/test_redis_cluster.py):

* **A bound on in-flight commands.** redis-py's asyncio cluster keeps at most
  `max_connections` connections per node and, past that, fails the command at once with
  `MaxConnectionsError` instead of waiting (a plain `Redis` pool can block). 1200 concurrent
  keyed calls then failed as "store unavailable" and lost renewals. `ClusterGate` makes
  callers queue for a connection instead (a semaphore of `max_connections` slots per store):
  a command holds one node connection at a time, so no node can run out.
* **A driver race mapped to what it is.** After a connection error on a node, redis-py 8.1
  closes that node's idle connections (`disconnect_free_connections`) while they stay in the
  free list; another task can take one, pass its "connected?" check, yield (the
  `socket_timeout` wrapper), and then write on a writer the close just set to None:
  `AttributeError: 'NoneType' object has no attribute 'writelines'` escapes the client (the
  same bug surfaces as `TypeError` on Python 3.12+, redis-py #4287). Neither is a
  `RedisError`, so it bypassed the store's one safe retry and its fail-closed mapping: a
  `complete` was not retried and its outcome was lost. `driver_fault` recognises an
  AttributeError/TypeError raised inside redis-py or asyncio's transport code, and the store
  treats it as the broken connection it is.
* **MOVED updates one slot, not the whole map** (`reinitialize_steps=0`). By default redis-py
  re-reads the topology every 5th MOVED, and each refresh marks *every* connection of every
  node for reconnect; during `redis-cli --cluster reshard` that meant tens of thousands of
  reconnects, the race above, and claims refused as "store unavailable". With 0, a MOVED
  moves just its slot (redis-py's `move_slot`); connection errors still refresh everything.
  Under a 1000-slot reshard with calls flowing: 26 failed commands before, none after.
* **WAIT on the connection that wrote.** `WAIT n ms` counts replicas that acknowledged the
  writes of *its own connection*, so it must follow the script on the same one; a pooled
  client gives no such guarantee. `eval_and_wait` sends both in one write on one connection
  (a plain pipeline on one Redis; the key's primary's own connection on a Cluster).
"""

from __future__ import annotations

import asyncio
import traceback
from typing import TYPE_CHECKING, Any

from redis import exceptions as redis_errors

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.cluster import RedisCluster

DEFAULT_MAX_CONNECTIONS = 100
"""redis-py's own per-node default; also the number of commands a store keeps in flight."""

KEEPER_MAX_CONNECTIONS = 8
"""The lease keeper's cluster client: renewals only, a few at a time."""

# Connection settings bound to the client that made them (redis-py 8): never copied over.
_PRIVATE_SETTINGS = (
    "himport_registry",
    "oss_cluster_maint_notifications_handler",
    "maint_notifications_config",
    "response_callbacks",
    "connection_class",
    "max_connections",
    "retry",
)

_DRIVER_PATHS = ("/redis/", "\\redis\\", "/asyncio/", "\\asyncio\\")


def is_cluster(client: object) -> bool:
    """True for a `redis.asyncio.RedisCluster` (imported lazily: the extra may lack it)."""
    try:
        from redis.asyncio.cluster import RedisCluster
    except ImportError:  # pragma: no cover - every redis-py with asyncio has it
        return False
    return isinstance(client, RedisCluster)


def topology(client: RedisCluster) -> object:
    """Something that changes identity each time the client re-reads the cluster's topology
    (start-up, a failover, connection errors): redis-py builds a new slots map each time."""
    return getattr(getattr(client, "nodes_manager", None), "slots_cache", None)


def cluster_from_url(url: str, **kwargs: Any) -> RedisCluster:
    """A `RedisCluster` for `redis+cluster://host:port` (or `rediss+cluster://`, TLS).

    The host:port is any one node; the client discovers the others (CLUSTER SLOTS). Several
    may be listed, `redis+cluster://h1:6379,h2:6379,h3:6379/0`: a client starting while one
    of them is down (the node a failover just replaced) starts from the next.
    """
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    scheme, _, rest = url.partition("://")
    plain = ("rediss" if scheme.lower().startswith("rediss") else "redis") + "://"
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    first, *others = hosts.split(",")
    if others:
        nodes = []
        for host in others:
            name, _, port = host.rpartition(":") if ":" in host else (host, "", "6379")
            nodes.append(ClusterNode(name or "127.0.0.1", int(port or 6379)))
        kwargs["startup_nodes"] = [*kwargs.get("startup_nodes", []), *nodes]
    kwargs.setdefault("max_connections", DEFAULT_MAX_CONNECTIONS)
    kwargs.setdefault("reinitialize_steps", 0)  # see the module docstring: slots in motion
    return RedisCluster.from_url(plain + userinfo + at + first + slash + tail, **kwargs)


def driver_fault(exc: BaseException) -> bool:
    """An AttributeError/TypeError raised inside redis-py or asyncio: a connection that broke
    under a concurrent close (see the module docstring), never a bug of ours or a caller's."""
    if not isinstance(exc, (AttributeError, TypeError)) or "NoneType" not in str(exc):
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and any(p in frames[-1].filename for p in _DRIVER_PATHS)


class ClusterGate:
    """At most `limit` commands of one store in flight, so no node's pool overflows.

    Created lazily on the loop that first uses the store (an asyncio client belongs to one
    loop anyway); `limit` is the client's per-node `max_connections`.
    """

    __slots__ = ("limit", "semaphore")

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self.semaphore: asyncio.Semaphore | None = None

    def get(self) -> asyncio.Semaphore:
        if self.semaphore is None:
            self.semaphore = asyncio.Semaphore(self.limit)
        return self.semaphore


def max_connections(client: RedisCluster) -> int:
    value = client.get_connection_kwargs().get("max_connections")
    return value if isinstance(value, int) and value > 0 else DEFAULT_MAX_CONNECTIONS


def keeper_cluster(client: RedisCluster) -> RedisCluster | None:
    """A new, small `RedisCluster` on the same nodes and settings, for the lease keeper's own
    thread and loop; None when the settings cannot be carried over (then renewals run on the
    server's loop, as for any store without a clone)."""
    from redis.asyncio.cluster import ClusterNode, RedisCluster

    settings: dict[str, Any] = {
        name: value
        for name, value in client.get_connection_kwargs().items()
        if name not in _PRIVATE_SETTINGS
    }
    connection_class = client.get_connection_kwargs().get("connection_class")
    if connection_class is not None and connection_class.__name__ != "Connection":
        return None  # TLS and custom connections: their settings are not all constructor args
    nodes = client.get_nodes() or list(client.startup_nodes)
    startup = [ClusterNode(node.host, node.port) for node in nodes]
    try:
        return RedisCluster(
            startup_nodes=startup,
            max_connections=KEEPER_MAX_CONNECTIONS,
            reinitialize_steps=client.reinitialize_steps,
            retry=client.retry,
            **settings,
        )
    except (TypeError, ValueError, redis_errors.RedisError):
        return None


async def eval_and_wait(
    client: Redis | RedisCluster,
    text: str,
    names: tuple[bytes, ...],
    args: tuple[bytes | str | int, ...],
    replicas: int,
    timeout_ms: int,
) -> tuple[Any, int]:
    """EVAL `text` on `names` (one slot), then `WAIT replicas timeout_ms` on the same connection.

    Returns the script's reply and how many replicas acknowledged. EVAL, not EVALSHA: no
    NOSCRIPT round trip to handle here, and the script text is small next to a replica's
    acknowledgement. On a Cluster a MOVED/ASK reply (a slot in motion) is raised as the
    redirect error after the slot cache was refreshed, so the store's retry finds the new
    primary.
    """
    from redis.asyncio.cluster import RedisCluster

    if not isinstance(client, RedisCluster):
        pipe = client.pipeline(transaction=False)
        pipe.eval(text, len(names), *names, *args)
        pipe.execute_command("WAIT", replicas, timeout_ms)
        reply, acked = await pipe.execute()
        return reply, int(acked)
    cluster = client
    if cluster._initialize:  # first use, or a topology change flagged by a failed command
        await cluster.initialize()
    name = names[0]
    node = cluster.get_node_from_key(name)  # type: ignore[arg-type]
    asking = False
    for _ in range(_REDIRECTS):
        if node is None:  # a slot nobody is known to serve: ask the cluster again
            await cluster.nodes_manager.initialize()
            raise redis_errors.ClusterDownError("no known node serves the record's slot")
        commands: list[tuple[Any, ...]] = [("ASKING",)] if asking else []
        commands += [("EVAL", text, len(names), *names, *args), ("WAIT", replicas, timeout_ms)]
        try:
            replies = await _send(node, commands)
        except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError):
            # As redis-py does for its own commands: re-read the topology before the next
            # command (the node may be gone and its replica promoted).
            cluster._initialize = True
            raise
        reply, acked = replies[-2], replies[-1]
        if isinstance(reply, redis_errors.MovedError):
            await cluster.nodes_manager.initialize()  # the slot has a new primary for good
            node, asking = cluster.get_node_from_key(name), False  # type: ignore[arg-type]
            continue
        if isinstance(reply, redis_errors.AskError):  # mid-migration: the key is there now
            node = cluster.get_node(host=reply.host, port=reply.port)
            asking = True
            continue
        if isinstance(reply, Exception):
            raise reply
        if isinstance(acked, Exception):
            raise acked
        return reply, int(acked)
    raise redis_errors.ClusterDownError("the record's slot kept moving")


_REDIRECTS = 5


async def _send(node: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """`commands` in one write on one of `node`'s connections; each reply or its error."""
    connection = node.acquire_connection()
    try:
        await connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except redis_errors.ResponseError as exc:
                replies.append(exc)
        return replies
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        node.release(connection)
