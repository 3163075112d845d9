"""RedisStore: records shared by every server instance through one Redis (or a Redis Cluster).

Why it is built this way:

* **One key per record, one Lua script per operation.** claim, renew, complete, release and get
  each run as a single server-side Lua script (EVALSHA; loaded on NOSCRIPT) touching exactly
  one key. A script runs atomically on the server, so no other client can slip in between "is
  the key free?" and "take it"; touching one key keeps every operation inside one hash slot, so
  the same code works on Redis Cluster (Cluster specifics live in `_redis_cluster.py`; Valkey
  is untested). A first execution therefore costs exactly two round trips (claim, complete)
  and a replay one (claim answers with the completed record).
* **Redis expires records itself.** Every write sets PEXPIRE (lease while in progress, retention
  once completed), so no sweeper is needed and `remaining` comes from PTTL, i.e. from the Redis
  server's clock: instances never compare their own clocks.
* **Records are hashes of plain fields** (`s` status, `f` fingerprint, `o` owner, `v` outcome
  JSON bytes) — data, never pickle. A key that holds anything else, or a record without the
  fields or the expiry this store always writes, is reported as `RecordCorruptError` rather than
  overwritten or replayed.
* **Key names are hashed**: `<prefix><sha256(scope, key)>`. Keys are client data of any
  characters (NUL, lone surrogates, `:`); hashing gives a fixed-length, unambiguous name and keeps
  client keys out of `MONITOR`/`KEYS` output. The prefix (default `idemtools:`) lets several
  servers or applications share one Redis database without colliding.
* **Fencing by owner token**: renew, complete and release act only when the record is still
  in progress (or lapsed, for complete and release) and still carries the caller's owner
  token, so a process whose lease ran out can never touch a newer claim or a completed
  record. `complete` alone also succeeds once the lease ran out and Redis deleted the claim,
  if no other record took its place (late completion: an outcome is lost only when a second
  execution already began).
* **Failures fail closed.** Any connection error, timeout or server error becomes
  `StoreUnavailableError` chained from the driver's exception (an out-of-memory refusal becomes
  `StoreFullError`: Redis is full, and records are never dropped to make room). The client
  reconnects on the next operation, so the store recovers by itself when Redis returns.
* **A Redis that may drop records is refused.** The first claim reads `maxmemory_policy` from
  `INFO memory` (`CONFIG GET` is often disabled on managed Redis). Every policy but
  `noeviction` lets Redis delete records inside their retention (`volatile-*` ones too: every
  record has a TTL), and a retry would then run again. On such a policy claims are refused
  (`StoreUnavailableError`, logged once at ERROR) unless the operator passed
  `allow_eviction=True` (`?allow_eviction=true` in the URL). The policy can change under a
  running server (`CONFIG SET`, a failover to a replica configured otherwise), so it is read
  again: at most every `policy_recheck` seconds, by the next claim after that time (one INFO,
  single-flight: claims arriving meanwhile go on under the last answer), and by the next claim
  after any connection of the store (re)connected or a Cluster's topology was re-read. Only
  claims are refused: renewals and completions of calls already running go on, so their
  outcomes are still recorded. A Redis without `maxmemory` is served, with one WARNING: it
  grows until the host runs out of memory instead of answering `idempotency_store_full`.
* **Writes are idempotent by owner.** A claim or completion that finds our own owner token
  already in place reports success (owner tokens are unique per call, so that record can only
  be ours), whoever sent it again: the store's own retry of an operation that failed on a
  broken connection, the driver's retry (a `RedisCluster` client's default), a proxy. The
  scripts decide it, so no path depends on the store knowing it retried.
* **Lapsed claims.** A claim records its lease end (`l`, server milliseconds), when it was
  made (`c`) and its keep (`k`, `keep_lapsed`), and the key expires `k` after `l`: a claim
  whose lease ran out stays, LAPSED, counted by `maxmemory` and a scope's quota like the
  claim it was, and a claim of the same fingerprint takes it over in the same script. A
  claim record without `l` (no lapsed bookkeeping) expires with its lease: a free key.
* **Per-scope quota** (`max_records_per_scope`, off by default): each scope has a sorted set,
  `<prefix>q:{<scope digest>}`, of its record key names scored by when each record was last
  known to expire. The claim script checks it in the same atomic step as the claim: while the
  set holds fewer members than the quota, a claim costs one ZCARD and one ZADD more; at the
  quota, members whose score has passed are looked up (PTTL of their record) and re-scored or
  removed, and only if the scope is still at its quota is the claim refused
  (`QuotaExceededError`). A renewal or completion re-scores its member and keeps the set alive
  at least as long as its records (one more round trip each, only with a quota); a release
  removes it. On Redis Cluster the record names of a
  store with a quota carry the scope digest as a hash tag, so a scope's records and its set
  share a slot (the script touches them together); without a quota, or on a single Redis, the
  names are those of a store without a quota, so turning the quota on or off does not hide
  any record there. (On Cluster it does: change it with the prefix, or after a retention.)
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import RecordCorruptError, StoreFullError, StoreUnavailableError
from ..outcome import tombstone
from ._common import at_least_one, corrupt, encode, key_digest, once_more_if_broken, quota_exceeded
from ._extras import require_extra
from ._url_options import defaults as option_defaults
from ._url_options import driver_refused, merged
from ._url_options import leftover as leftover_options
from ._url_options import take as take_options
from .base import Claim, Record, Status, StoreInfo, describe

with require_extra("redis", "RedisStore"):
    from redis import exceptions as redis_errors
    from redis.asyncio import BlockingConnectionPool, Redis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    from . import _redis_cluster as cluster
    from ._coalesce import Coalescer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from redis.asyncio.cluster import RedisCluster

__all__ = ["RedisStore"]

log = logging.getLogger("idemtools")

_POLICY_RECHECK = 5.0
"""Default seconds between reads of `maxmemory_policy` (`policy_recheck`)."""

_EVICTION_CLIENT_MESSAGE = (
    "the idempotency store could drop records before they expire, so keyed calls are refused "
    "until the server operator fixes it; the call was not run"
)

T = TypeVar("T")

_IN_PROGRESS = b"p"
_COMPLETED = b"c"
_LAPSED = b"l"  # in replies only: stored, a lapsed claim is 'p' past its lease end

# Every script: KEYS[1] is the record. Fields: s status ('p'|'c'), f fingerprint, o owner,
# v outcome; a claim's l lease end and c claim time (server ms) and k keep (ms); r '1' for a
# replaceable outcome. A record travels back as ONE bulk string,
# "<s> <pttl> <#f> <#o> <#v|-1> <claimed|-1> <lapsed|-1> <r> <f><o><v>" (s 'l': lapsed):
# redis-py's parser costs per reply element, and one string instead of a six-element array is
# what keeps a replay within a few percent of a plain GET. Anything that is not a record this
# store wrote (another type under our name, missing fields, no expiry) comes back as
# {-1, reason}, so the caller reports corruption rather than an outage or a free key.

_READ_RECORD = """
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The record as one string, then its status ('p', 'c' or 'l'), fingerprint and owner; nil
-- when there is none (or only a claim whose lease just ran out with no keep).
local function record(k)
  local r = redis.pcall('HMGET', k, 's', 'f', 'o', 'v', 'l', 'c', 'k', 'r')
  if r.err then return {-1, 'the key holds something other than an idemtools record'} end
  if not (r[1] or r[2] or r[3] or r[4]) then
    if redis.call('EXISTS', k) == 1 then return {-1, 'a hash without idemtools fields'} end
    return nil
  end
  if not (r[1] and r[2] and r[3]) then return {-1, 'status, fingerprint or owner missing'} end
  local v, lv = r[4], -1
  if v then lv = #v else v = '' end
  local s, ttl, lapsed = r[1], redis.call('PTTL', k), '-1'
  if s == 'p' and r[5] and ttl >= 0 then
    local left = tonumber(r[5]) - clock()
    if left > 0 then
      ttl = left  -- the lease's, not the keep's after it
    elseif tonumber(r[7] or '0') > 0 then
      s, lapsed = 'l', r[5]
    else
      return nil  -- its lease ran out this very millisecond, with no keep: a free key
    end
  end
  return s .. ' ' .. ttl .. ' ' .. #r[2] .. ' ' .. #r[3] .. ' ' .. lv .. ' ' .. (r[6] or '-1')
         .. ' ' .. lapsed .. ' ' .. (r[8] or '0') .. ' ' .. r[2] .. r[3] .. v, s, r[2], r[3]
end
"""

# ARGV: fingerprint, owner, lease ms, keep ms. Returns 1 (claimed, or ours already: a re-sent
# claim), {1, the lapsed record} (taken over), or the record that holds the key.
# Our own claim sent again is answered as the first was: a take-over with the lapsed claim it
# took over (kept in pc, pl, pu, po: its claim time, lapse, end and owner).
_CLAIM_BODY = """
local rec, s, f, o = record(KEYS[1])
if type(rec) == 'table' then return rec end
if rec and s == 'p' and o == ARGV[2] then
  local p = redis.call('HMGET', KEYS[1], 'pc', 'pl', 'pu', 'po')
  if not p[4] then return 1 end
  return {1, 'l ' .. math.max(0, tonumber(p[3]) - clock()) .. ' ' .. #f .. ' ' .. #p[4]
             .. ' -1 ' .. p[1] .. ' ' .. p[2] .. ' 0 ' .. f .. p[4]}
end
if rec and (s ~= 'l' or f ~= ARGV[1]) then return rec end
"""

_CLAIM_WRITE = """
local now, lease, keep = clock(), tonumber(ARGV[3]), tonumber(ARGV[4])
if rec then
  local p = redis.call('HMGET', KEYS[1], 'c', 'l')
  redis.call('HSET', KEYS[1], 'pc', p[1] or '-1', 'pl', p[2],
             'pu', now + redis.call('PTTL', KEYS[1]), 'po', o)
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  -- What a claim whose lease ran out this very millisecond left. Only then: any write makes
  -- Redis skip its out-of-memory check for the rest of the script (HSET below).
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 's', 'p', 'f', ARGV[1], 'o', ARGV[2], 'l', now + lease, 'c', now,
           'k', keep)
redis.call('PEXPIRE', KEYS[1], lease + keep)
"""

_CLAIM = (
    _READ_RECORD
    + _CLAIM_BODY
    + _CLAIM_WRITE
    + """
if rec then return {1, rec} end
return 1
"""
)

# Quota variant of _CLAIM. KEYS[2] is the scope's sorted set (member: record key name, score:
# its expiry as last known, server milliseconds); ARGV[5] the quota. Returns -2 when refused.
# A lapsed claim taken over is the same record: no room is needed.
_CLAIM_QUOTA = (
    _READ_RECORD
    + _CLAIM_BODY
    + """
local now, quota = clock(), tonumber(ARGV[5])
if not rec and redis.call('ZCARD', KEYS[2]) >= quota then
  local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, quota)
  for _, m in ipairs(due) do
    local ttl = redis.call('PTTL', m)
    if ttl > 0 then
      redis.call('ZADD', KEYS[2], now + ttl, m)
      if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
    else
      redis.call('ZREM', KEYS[2], m)
    end
  end
  if redis.call('ZCARD', KEYS[2]) >= quota then return -2 end
end
"""
    + _CLAIM_WRITE
    + """
redis.call('ZADD', KEYS[2], now + lease + keep, KEYS[1])
if redis.call('PTTL', KEYS[2]) < lease + keep then
  redis.call('PEXPIRE', KEYS[2], lease + keep)
end
if rec then return {1, rec} end
return 1
"""
)

# After a completion, with a quota: KEYS[1] the scope's set, KEYS[2] the record. Re-score the
# record's member from its real expiry, and keep the set alive at least as long.
_TRACK = """
local ttl = redis.call('PTTL', KEYS[2])
if ttl <= 0 then
  redis.call('ZREM', KEYS[1], KEYS[2])
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + ttl, KEYS[2])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"""

_GET = (
    _READ_RECORD
    + """
local rec = record(KEYS[1])
if rec then return rec end
return 0
"""
)

# The claim held by ARGV[1] while its lease is live (a record without a lease end `l` expires
# at its lease's end). Sets `r` (its fields) and `now`.
_HELD = """
local r = redis.pcall('HMGET', KEYS[1], 's', 'o', 'l', 'k')
if type(r) == 'table' and r.err then return 0 end
if r[1] ~= 'p' or r[2] ~= ARGV[1] then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if r[3] and tonumber(r[3]) <= now then return 0 end
local keep = tonumber(r[4] or '0')
"""

# The keep follows the renewed lease.
_RENEW = (
    _HELD
    + """
redis.call('HSET', KEYS[1], 'l', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + keep)
return 1
"""
)

# ARGV: owner, outcome, retention ms, '1' when a WAIT follows, fingerprint ('' when the caller
# gave none), '1' for a replaceable outcome. Late completion: the claim's lease may have run
# out (Redis then deleted the key, or kept it lapsed): with nobody else's record in its place,
# the outcome is recorded all the same. Our own completed record: a replaceable one is
# overwritten, any other left as it is and answered yes (a re-sent completion). Another
# owner's claim or completed record is never overwritten.
_COMPLETE = """
local r = redis.pcall('HMGET', KEYS[1], 's', 'o', 'r')
if type(r) == 'table' and r.err then return 0 end
if not r[1] and not r[2] then
  if ARGV[5] == '' or redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
  redis.call('HSET', KEYS[1], 's', 'c', 'f', ARGV[5], 'o', ARGV[1], 'v', ARGV[2], 'r', ARGV[6])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if r[2] ~= ARGV[1] then return 0 end
if r[1] == 'c' and r[3] ~= '1' then
  if ARGV[4] == '1' then  -- a write that changes nothing, so the WAIT after it means it
    redis.call('PEXPIRE', KEYS[1], redis.call('PTTL', KEYS[1]))
  end
  return 1
end
if r[1] ~= 'p' and r[1] ~= 'c' then return 0 end
redis.call('HSET', KEYS[1], 's', 'c', 'v', ARGV[2], 'r', ARGV[6])
redis.call('HDEL', KEYS[1], 'l', 'c', 'k', 'pc', 'pl', 'pu', 'po')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# The same completion for a tombstone (ARGV[2]), allowed to write on a Redis out of memory: a
# full Redis (noeviction) refuses every write, and a completion it refused would leave the key
# to run again after its lease. Tombstones are a few dozen bytes, the one write let past
# maxmemory. Script flags need Redis 7 (an older Redis fails this script: the outcome is then
# lost, as on a Redis without this script).
_COMPLETE_TOMBSTONE = "#!lua flags=allow-oom\n" + _COMPLETE

# The claim held by ARGV[1], in progress or lapsed (its lease ran out; the key is still
# there only while its keep lasts): deleted (an operator's release of a lapsed claim lets the
# next claim run the tool again). ARGV[2] == '1': a live claim goes to LAPSED from now, for
# its keep (deleted when it has none); a lapsed one is left as it is (0).
_RELEASE = """
local r = redis.pcall('HMGET', KEYS[1], 's', 'o', 'l', 'k')
if type(r) == 'table' and r.err then return 0 end
if r[1] ~= 'p' or r[2] ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if r[3] and tonumber(r[3]) <= now then return 0 end
  local keep = tonumber(r[4] or '0')
  if keep > 0 then
    redis.call('HSET', KEYS[1], 'l', now)
    redis.call('PEXPIRE', KEYS[1], keep)
    return 1
  end
end
redis.call('DEL', KEYS[1])
return 1
"""

# An operator's forced release (`idemtools keys release --force`): the record held by ARGV[1],
# whatever its status.
_FORGET = """
local r = redis.pcall('HMGET', KEYS[1], 'o')
if type(r) == 'table' and r.err then return 0 end
if r[1] ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


_CONNECTION_ERRORS = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
)


# Connection settings a pool keeps for itself (redis-py 6+): never copied into another pool.
_POOL_PRIVATE = ("himport_registry", "maint_notifications", "orig_")


def _nodes(info: Any) -> list[dict[str, Any]]:
    """INFO's answer per server: one server's dict, or a cluster's dict per node."""
    if not isinstance(info, dict):
        return []
    if "maxmemory_policy" in info:
        return [info]
    return [node for node in info.values() if isinstance(node, dict) and "maxmemory_policy" in node]


def _policies(info: Any) -> set[str]:
    """`maxmemory_policy` from INFO, over every server that answered."""
    return {str(node["maxmemory_policy"]) for node in _nodes(info)}


def _unbounded(info: Any) -> bool:
    """True when some server answered `maxmemory:0` (no limit at all)."""
    return any(str(node.get("maxmemory", "")) == "0" for node in _nodes(info))


def _ms(seconds: float) -> int:
    """Seconds → whole milliseconds for PEXPIRE, never 0 (PEXPIRE 0 deletes the key)."""
    return max(1, round(seconds * 1000))


class _Script:
    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode()).hexdigest()


class RedisStore:
    """Idempotency records in Redis, shared by all server instances that use the same prefix.

    Args:
        client: a `redis.asyncio.Redis` (or `RedisCluster`) client. A client passed in stays
            the caller's: `aclose()` does not close it. Prefer `RedisStore.from_url`.
        prefix: prepended to every key name; give each application its own prefix when
            several share one Redis database.
        max_records_per_scope: live records (in progress or completed) per scope at most; a
            claim beyond it is refused with `QuotaExceededError`, other scopes unaffected.
            None (the default): no quota, and a claim costs what it always did. The store as
            a whole is bounded by Redis `maxmemory` (claims refused with `StoreFullError`
            under `maxmemory-policy noeviction`).
        allow_eviction: serve keyed calls even when Redis' `maxmemory-policy` is not
            `noeviction`. Redis may then delete records inside their retention, and a retry of
            an evicted key runs again. Off by default: on an evicting policy keyed calls are
            refused with `idempotency_store_unavailable`, and the log says why.
        coalesce: send operations issued while others are in flight as one pipeline per
            event-loop tick (each still its own script, with its own reply or error): several
            times the throughput under concurrency, nothing added to a lone call. On by
            default; ignored for a `RedisCluster`.
        wait_replicas: after each claim and each completion, `WAIT` until this many replicas
            acknowledged it (0, the default: no WAIT). Redis replicates asynchronously, so
            without it a failover can lose a claim or an outcome the store already reported
            written, and a retry then runs the tool again. A claim acknowledged by fewer
            replicas within `wait_timeout` is released and refused
            (`idempotency_store_unavailable`, the call was not run); a completion is retried
            by the engine, and if it stays under-replicated the caller still gets its answer
            while the log says the outcome may not survive a failover.
        wait_timeout: seconds each WAIT may take.
        policy_recheck: seconds between reads of Redis' `maxmemory-policy` (a claim after
            that time reads it again, as does the first claim after a reconnect or a
            Cluster topology change), so a policy changed at run time is noticed.

    Build one with `RedisStore.from_url("redis://host:6379/0")`; records survive server
    restarts of idemtools (and of Redis when it persists, i.e. with AOF or RDB).
    """

    kind = "redis"

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        prefix: str = "idemtools:",
        max_records_per_scope: int | None = None,
        allow_eviction: bool = False,
        coalesce: bool = True,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        policy_recheck: float = _POLICY_RECHECK,
        _owns_client: bool = False,
    ) -> None:
        at_least_one("max_records_per_scope", max_records_per_scope, none="no quota")
        if wait_replicas < 0 or wait_timeout <= 0:
            raise ValueError("wait_replicas must be at least 0 and wait_timeout positive")
        if policy_recheck <= 0:
            raise ValueError("policy_recheck must be positive")
        self.policy_recheck = policy_recheck
        self.wait_replicas = wait_replicas
        self.wait_timeout = wait_timeout
        is_cluster = cluster.is_cluster(client)
        # A Cluster fails commands past max_connections per node instead of waiting: queue.
        self._gate = cluster.ClusterGate(cluster.max_connections(client)) if is_cluster else None  # type: ignore[arg-type]
        self._client = client
        self.prefix = prefix
        self.max_records_per_scope = max_records_per_scope
        self.allow_eviction = allow_eviction
        # Eviction policy: re-read when due (first claim, every `policy_recheck` s, after a
        # reconnect); `_policy_refusal` says why claims are refused meanwhile, if they are.
        self._policy_due = True
        self._policy_next = 0.0
        self._policy_refusal: str | None = None
        self._policy_seen: tuple[str, ...] = ()
        self._policy_known = False  # a read has answered at least once
        self._policy_lock: asyncio.Lock | None = None
        self._unbounded_warned = False
        self._prefix_bytes = encode(prefix)
        # Only a Cluster needs a scope's records and its quota set in one slot (hash tag).
        self._tagged = max_records_per_scope is not None and is_cluster
        self._owns_client = _owns_client
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if kwargs.get("decode_responses"):
            raise ValueError(
                "RedisStore needs a client with decode_responses=False (outcomes are bytes)"
            )
        self._claim = _Script(_CLAIM)
        self._claim_quota = _Script(_CLAIM_QUOTA)
        self._track = _Script(_TRACK)
        self._renew = _Script(_RENEW)
        self._complete = _Script(_COMPLETE)
        self._complete_tombstone = _Script(_COMPLETE_TOMBSTONE)
        self.outcomes_not_kept = 0
        """Completions recorded as a tombstone because Redis was out of memory."""
        self._release = _Script(_RELEASE)
        self._forget = _Script(_FORGET)
        self._get = _Script(_GET)
        # Concurrent operations share pipelines (stores/_coalesce.py); never on a Cluster.
        self._coalescer = Coalescer(client) if coalesce and isinstance(client, Redis) else None
        self._evalsha: Callable[..., Awaitable[Any]] = (
            self._coalescer.evalsha if self._coalescer is not None else client.evalsha
        )
        self._topology: object = None  # a Cluster's slots map when the policy was last read
        if not is_cluster:
            _on_new_connections(getattr(client, "connection_pool", None), self._reconnected)

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "idemtools:",
        max_records_per_scope: int | None = None,
        allow_eviction: bool = False,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        policy_recheck: float = _POLICY_RECHECK,
        connect_timeout: float = 2.0,
        timeout: float = 5.0,
        max_connections: int | None = None,
        coalesce: bool = True,
        **client_kwargs: Any,
    ) -> RedisStore:
        """Connect lazily to `url` (`redis://`, `rediss://`, `unix://`); closed by `aclose()`.

        `redis+cluster://host:port` (`rediss+cluster://` with TLS) is a Redis Cluster: any one
        node, the client finds the rest. `max_connections` is then per node (default 100),
        and also how many commands the store keeps in flight (the rest queue).

        Timeouts are short by default because a keyed call waits on the store before its tool
        runs: better to answer `idempotency_store_unavailable` in seconds than to hang. The
        client's own retries are turned off; the store retries once itself, safely (see the
        module docstring).

        idemtools' own options may ride in the URL's query (`?prefix=app:&timeout=2s`); a
        keyword given too wins. The rest of the query goes to redis-py, which is asked now
        whether it takes it: an unknown option is refused here, by name.
        """
        given = dict(locals())  # the parameters, before anything else is bound
        url, found = take_options(url, "redis")
        if found:
            own = merged(found, given, option_defaults(cls.from_url))
            return cls.from_url(url, **own, **client_kwargs)
        kwargs: dict[str, Any] = {
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 30,
        }
        if max_connections is not None:
            kwargs["max_connections"] = max_connections
        kwargs.update(client_kwargs)
        client: Redis | RedisCluster
        try:
            if url.partition("://")[0].lower() in ("redis+cluster", "rediss+cluster"):
                kwargs.pop("health_check_interval")  # a Cluster checks nodes itself
                client = cluster.cluster_from_url(url, **kwargs)
            else:
                # A blocking pool: past `max_connections` (default 100) concurrent commands, a
                # command waits up to `timeout` for a connection instead of failing at once
                # (redis-py's default pool raises MaxConnectionsError: a refused keyed call).
                kwargs.setdefault("max_connections", 100)
                pool = BlockingConnectionPool.from_url(url, timeout=timeout, **kwargs)
                if leftover_options(url):  # built, not connected: redis-py checks its options
                    pool.make_connection()  # type: ignore[no-untyped-call]
                client = Redis.from_pool(pool)  # the client owns the pool: aclose() closes both
        except (TypeError, ValueError) as exc:
            refused = driver_refused("redis", url, exc)
            if refused is None:
                raise
            raise refused from None
        return cls(
            client,
            prefix=prefix,
            max_records_per_scope=max_records_per_scope,
            allow_eviction=allow_eviction,
            coalesce=coalesce,
            wait_replicas=wait_replicas,
            wait_timeout=wait_timeout,
            policy_recheck=policy_recheck,
            _owns_client=True,
        )

    def for_lease_keeper(self) -> RedisStore | None:
        """A store on the same records with a small client of its own, for the lease keeper's
        thread (a redis-py asyncio client belongs to the event loop that first used it).

        Built from this client's connection settings; for a `RedisCluster`, a small cluster
        client of its own on the same nodes. None when the settings cannot be carried over
        (a TLS cluster): renewals then go through the server's own event loop (see
        `idemtools.engine.lease_keeper`).
        """
        if self._gate is not None:
            return self._keeper_store(cluster.keeper_cluster(self._client))  # type: ignore[arg-type]
        pool = getattr(self._client, "connection_pool", None)
        if not isinstance(self._client, Redis) or pool is None:
            return None
        settings = {
            name: value
            for name, value in pool.connection_kwargs.items()
            if not name.startswith(_POOL_PRIVATE)  # bound to the original pool
        }
        # Blocking: renewals due together wait for one of the few connections instead of
        # failing with MaxConnectionsError (which the soak test saw lose leases).
        keeper_pool = BlockingConnectionPool(
            connection_class=pool.connection_class, max_connections=8, timeout=5, **settings
        )
        return self._keeper_store(Redis(connection_pool=keeper_pool))

    def _keeper_store(self, client: Redis | RedisCluster | None) -> RedisStore | None:
        if client is None:
            return None
        keeper = RedisStore(
            client,
            prefix=self.prefix,
            max_records_per_scope=self.max_records_per_scope,
            allow_eviction=self.allow_eviction,
            _owns_client=True,
        )
        # It only renews claims this store made; claims alone check the eviction policy.
        return keeper

    @property
    def client(self) -> Redis | RedisCluster:
        """The underlying client (for operators' own inspection; do not write our keys)."""
        return self._client

    def key_name(self, scope: str, key: str) -> bytes:
        """The Redis key of a record: prefix + SHA-256 of the length-prefixed scope and key.

        On Redis Cluster with a quota, the scope's hash tag (see `quota_name`) comes between.
        """
        s, k = encode(scope), encode(key)
        digest = hashlib.sha256(b"%d:" % len(s) + s + k).hexdigest()
        if self._tagged:
            return self._prefix_bytes + b"{" + _scope_tag(s) + b"}" + digest.encode("ascii")
        return self._prefix_bytes + digest.encode("ascii")

    def quota_name(self, scope: str) -> bytes:
        """The Redis key of a scope's quota set: prefix + "q:{" + scope digest + "}"."""
        return self._prefix_bytes + b"q:{" + _scope_tag(encode(scope)) + b"}"

    @property
    def description(self) -> str:
        """Where the records live, safe for logs: host, port and database, never a password."""
        kwargs = getattr(getattr(self._client, "connection_pool", None), "connection_kwargs", {})
        if "path" in kwargs:
            where = f"unix://{kwargs['path']}"
        elif "host" in kwargs:
            where = f"redis://{kwargs['host']}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
        else:
            where = type(self._client).__name__
        return f"{where} prefix={self.prefix!r}"

    def info(self) -> StoreInfo:
        """Redis, bounded by its `maxmemory`; `max_records_per_scope` when a quota is set."""
        return StoreInfo(
            kind=self.kind,
            label="Redis",
            description=describe(self.kind, self.description),
            restarts="Records survive server restarts; they survive a Redis restart only as far "
            "as Redis persistence is configured.",
            instances="Shared by every instance that uses the same Redis.",
            bound="Redis `maxmemory` (with `maxmemory-policy noeviction`)",
            max_records_per_scope=self.max_records_per_scope,
        )

    # -- plumbing -------------------------------------------------------------------------------

    def _reconnected(self, *_: object) -> None:
        """A connection (re)connected, or a Cluster re-read its topology: the server behind it
        may be another one (a failover, a DNS switch), so the next claim reads the policy."""
        self._policy_due = True

    async def _check_policy(self, key: str) -> None:
        """Refuse claims on a Redis whose `maxmemory-policy` may evict our records.

        Runs when a read is due (see `_call_once`). Single-flight: while one claim reads the
        policy, the others go on under the last answer, or wait for it when there is none yet
        (no claim is ever served on a policy nobody read). Connection errors propagate (the
        store is then unavailable, and the next claim reads again).
        """
        if self._policy_lock is None:
            self._policy_lock = asyncio.Lock()
        lock = self._policy_lock
        if lock.locked() and self._policy_known and self._policy_refusal is None:
            return
        async with lock:
            if not self._policy_due and time.monotonic() < self._policy_next:
                if self._policy_refusal is not None:
                    raise self._eviction_error(key)
                return
            await self._check_policy_now(key)

    async def _read_memory_info(self) -> Any:
        # Every node of a Cluster, replicas too (a failover promotes them); redis-py would
        # ask its default node alone.
        options = {"target_nodes": "all"} if self._gate is not None else {}

        async def read(_retrying: bool) -> Any:
            return await self._client.info("memory", **options)

        # Once more on a fresh connection after a broken one.
        return await once_more_if_broken(read, lambda exc: isinstance(exc, _CONNECTION_ERRORS))

    async def _check_policy_now(self, key: str) -> None:
        self._policy_due = False
        self._policy_next = time.monotonic() + self.policy_recheck
        try:
            info = await self._read_memory_info()
        except redis_errors.ResponseError as exc:  # INFO renamed or denied by an ACL
            policies: set[str] = set()
            unreadable = f"INFO memory failed ({exc})"
            info = None
        except BaseException:
            self._policy_due = True
            raise
        else:
            policies = _policies(info)
            unreadable = "INFO memory has no maxmemory_policy" if not policies else ""
        if _unbounded(info) and not self._unbounded_warned:
            self._unbounded_warned = True
            log.warning(
                "Redis store %s: Redis has no maxmemory, so it grows until the host runs out "
                "of memory (swap, the OOM killer) instead of refusing new keyed calls with "
                "idempotency_store_full; set maxmemory (with maxmemory-policy noeviction)",
                self.description,
            )
        self._policy_known = True
        seen, self._policy_seen = self._policy_seen, tuple(sorted(policies))
        evicting = sorted(p for p in policies if p != "noeviction")
        if not evicting and not unreadable:
            if self._policy_refusal is not None:
                log.warning(
                    "Redis store %s: maxmemory-policy is now noeviction; keyed calls "
                    "are served again",
                    self.description,
                )
            self._policy_refusal = None
            return
        why = (
            f"maxmemory-policy is {', '.join(evicting)}: Redis may delete idempotency records "
            "before their retention ends, and a retry would then run the tool again"
            if evicting
            else f"cannot tell whether Redis may evict records: {unreadable}"
        )
        if self.allow_eviction:
            if seen != self._policy_seen or not seen:
                log.warning(
                    "Redis store %s: %s; served anyway because allow_eviction=True",
                    self.description,
                    why,
                )
            self._policy_refusal = None
            return
        if self._policy_refusal is None:
            log.error(
                "Redis store %s refuses keyed calls: %s. Set `maxmemory-policy noeviction` on "
                "the Redis server (a full Redis then answers idempotency_store_full instead of "
                "forgetting records), or accept the risk with allow_eviction=True "
                "(?allow_eviction=true in the store URL)",
                self.description,
                why,
            )
        self._policy_refusal = why
        raise self._eviction_error(key)

    def _eviction_error(self, key: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"Redis store {self.description} refuses keyed calls: {self._policy_refusal}",
            key=key,
            client_message=_EVICTION_CLIENT_MESSAGE,
        )

    async def _call(
        self, op: Callable[[bool], Awaitable[T]], key: str, *, claim: bool = False
    ) -> T:
        """Run `op(retrying)`; retry once on a broken connection; map failures to our errors.

        A `claim` first reads the eviction policy when a read is due, and is refused while
        the last read found an evicting one."""
        if self._gate is not None:
            async with self._gate.get():
                return await self._call_once(op, key, claim)
        return await self._call_once(op, key, claim)

    async def _read_policy_early(self, key: str) -> None:
        # The first operation of any kind reads the policy, so the start-up check (a `get`)
        # logs an evicting Redis, or one without maxmemory, when the server starts rather
        # than at the first claim. Only claims are refused: a replay or `idemtools keys show`
        # on an evicting Redis still reads what is there.
        with contextlib.suppress(StoreUnavailableError):
            await self._check_policy(key)

    async def _call_once(self, op: Callable[[bool], Awaitable[T]], key: str, claim: bool) -> T:
        try:
            if not claim and not self._policy_known:
                await self._read_policy_early(key)
            if claim:
                if self._gate is not None and cluster.topology(self._client) is not self._topology:  # type: ignore[arg-type]
                    self._topology = cluster.topology(self._client)  # type: ignore[arg-type]
                    self._policy_due = True  # a failover may have put other servers in place
                if (
                    self._policy_due
                    or self._policy_refusal is not None
                    or time.monotonic() >= self._policy_next
                ):
                    await self._check_policy(key)
            # The pool dropped the broken connection; a fresh one is tried once. A server
            # that is really gone fails again at once (connection refused) or after
            # `connect_timeout`.
            return await once_more_if_broken(op, _broken)
        except redis_errors.ResponseError as exc:
            # redis-py strips the "OOM" prefix when it maps the reply to OutOfMemoryError.
            if isinstance(exc, redis_errors.OutOfMemoryError) or str(exc).startswith("OOM"):
                raise StoreFullError(
                    "Redis is out of memory (maxmemory reached); new keyed calls are refused "
                    "until records expire",
                    key=key,
                ) from exc
            raise StoreUnavailableError(f"Redis refused the operation: {exc}", key=key) from exc
        except (redis_errors.RedisError, *_CONNECTION_ERRORS) as exc:
            raise StoreUnavailableError(f"Redis is unavailable: {exc!r}", key=key) from exc
        except redis_errors.RedisClusterException as exc:  # not a RedisError: no node reachable
            raise StoreUnavailableError(f"Redis Cluster is unavailable: {exc!r}", key=key) from exc
        except (AttributeError, TypeError) as exc:
            if not cluster.driver_fault(exc):
                raise
            raise StoreUnavailableError(f"Redis connection broke: {exc!r}", key=key) from exc

    async def _eval(self, script: _Script, name: bytes, *args: bytes | str | int) -> Any:
        """EVALSHA, loading the script on NOSCRIPT (first use, or after a server restart).

        Called directly rather than through redis-py's `Script` wrapper: one less layer on the
        hot path, and the same single round trip.
        """
        try:
            return await self._evalsha(script.sha, 1, name, *args)
        except redis_errors.NoScriptError:
            await self._client.script_load(script.text)
            return await self._evalsha(script.sha, 1, name, *args)

    async def _eval_and_wait(
        self, script: _Script, names: tuple[bytes, ...], *args: bytes | str | int
    ) -> tuple[Any, int]:
        """The script, then `WAIT wait_replicas` on the same connection: (reply, replicas that
        acknowledged). Only claim and complete wait; see `wait_replicas`."""
        return await cluster.eval_and_wait(
            self._client, script.text, names, args, self.wait_replicas, _ms(self.wait_timeout)
        )

    def _under_replicated(self, what: str, acked: int, key: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"Redis {what} reached {acked} of the {self.wait_replicas} replicas asked for "
            f"(wait_replicas) within {self.wait_timeout}s; a failover could lose it",
            key=key,
        )

    async def _eval2(
        self, script: _Script, names: tuple[bytes, bytes], *args: bytes | str | int
    ) -> Any:
        """`_eval` for the quota scripts, which touch two keys (of one slot on a Cluster)."""
        try:
            return await self._evalsha(script.sha, 2, *names, *args)
        except redis_errors.NoScriptError:
            await self._client.script_load(script.text)
            return await self._evalsha(script.sha, 2, *names, *args)

    @staticmethod
    def _record(reply: Any, key: str) -> Record:
        """Decode a record reply: bytes "<s> <pttl> <#f> <#o> <#v|-1> <claimed|-1> <lapsed|-1>
        <r> <f><o><v>", or {-1, why}."""
        if isinstance(reply, list):
            why = reply[1].decode("utf-8", "replace") if len(reply) > 1 else "unknown"
            raise _corrupt(key, why)
        try:
            status_raw, pttl_raw, lf_raw, lo_raw, lv_raw, c_raw, l_raw, r_raw, rest = reply.split(
                b" ", 8
            )
            pttl, lf, lo, lv = int(pttl_raw), int(lf_raw), int(lo_raw), int(lv_raw)
            claimed_ms, lapsed_ms = int(c_raw), int(l_raw)
        except (ValueError, AttributeError):
            raise _corrupt(key, "unreadable reply") from None
        if status_raw == _IN_PROGRESS:
            status = Status.IN_PROGRESS
        elif status_raw == _COMPLETED:
            status = Status.COMPLETED
        elif status_raw == _LAPSED:
            status = Status.LAPSED
        else:
            raise _corrupt(key, f"unknown status {status_raw!r}")
        outcome = rest[lf + lo :] if lv >= 0 else None
        if status is Status.COMPLETED and outcome is None:
            raise _corrupt(key, "completed without an outcome")
        if pttl < 0:
            # Every record we write has an expiry; one without would never go away.
            raise _corrupt(key, "record has no expiry")
        try:
            fingerprint = rest[:lf].decode("utf-8", "surrogatepass")
            owner = rest[lf : lf + lo].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            raise _corrupt(key, "fingerprint or owner is not text") from None
        return Record(
            status=status,
            fingerprint=fingerprint,
            owner=owner,
            remaining=pttl / 1000.0,
            outcome=outcome,
            claimed_at=None if claimed_ms < 0 or status is Status.COMPLETED else claimed_ms / 1e3,
            lapsed_at=lapsed_ms / 1000.0 if lapsed_ms >= 0 else None,
            replaceable=r_raw == b"1",
        )

    # -- the protocol ---------------------------------------------------------------------------

    async def claim(
        self,
        scope: str,
        key: str,
        fingerprint: str,
        owner: str,
        lease: float,
        *,
        keep_lapsed: float = 0.0,
    ) -> Claim:
        name = self.key_name(scope, key)
        quota = self.max_records_per_scope
        names = (name, self.quota_name(scope)) if quota is not None else None
        keep = round(keep_lapsed * 1000) if keep_lapsed > 0 else 0

        async def op(_retrying: bool) -> Claim:
            # A claim sent again (by this retry, the driver's or a proxy's) that finds our own
            # claim is answered 1 by the script itself.
            args: tuple[bytes | str | int, ...] = (fingerprint, owner, _ms(lease), keep)
            if names is not None:
                args = (*args, quota or 0)
            if self.wait_replicas:
                script = self._claim if names is None else self._claim_quota
                reply, acked = await self._eval_and_wait(script, names or (name,), *args)
                if reply == 1 and acked < self.wait_replicas:
                    with contextlib.suppress(redis_errors.RedisError, *_CONNECTION_ERRORS):
                        await self._eval(self._release, name, owner, 0)  # nothing ran yet
                    raise self._under_replicated("claim", acked, key)
            elif names is None:
                reply = await self._eval(self._claim, name, *args)
            else:
                reply = await self._eval2(self._claim_quota, names, *args)
            if names is not None and reply == -2:
                raise quota_exceeded(quota or 0, key)
            if reply == 1:
                return Claim(claimed=True)
            if isinstance(reply, list) and len(reply) == 2 and reply[0] == 1:
                return Claim(claimed=True, lapsed=self._record(reply[1], key))
            return Claim(claimed=False, existing=self._record(reply, key))

        return await self._call(op, key, claim=True)

    async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
        name = self.key_name(scope, key)

        async def op(_retrying: bool) -> bool:
            return bool(await self._eval(self._renew, name, owner, _ms(lease)))

        held = await self._call(op, key)
        if held and self.max_records_per_scope is not None:
            await self._track_quota(scope, name)
        return held

    async def complete(
        self,
        scope: str,
        key: str,
        owner: str,
        outcome: bytes,
        retention: float,
        *,
        fingerprint: str | None = None,
        replaceable: bool = False,
    ) -> bool:
        name = self.key_name(scope, key)

        def writing(script: _Script, data: bytes) -> Callable[[bool], Awaitable[bool]]:
            async def op(_retrying: bool) -> bool:
                # A completion sent again that finds our own completed record is answered 1 by
                # the script itself; before a WAIT it also writes (nothing changes) for WAIT
                # to count.
                wait = int(bool(self.wait_replicas))
                args = (owner, data, _ms(retention), wait, fingerprint or "", int(replaceable))
                if not self.wait_replicas:
                    return bool(await self._eval(script, name, *args))
                reply, acked = await self._eval_and_wait(script, (name,), *args)
                if reply == 1 and acked < self.wait_replicas:
                    raise self._under_replicated("completion", acked, key)
                return bool(reply)

            return op

        try:
            done = await self._call(writing(self._complete, outcome), key)
        except StoreFullError:
            # Out of memory: keep a tombstone, so the retry is refused rather than run again.
            done = await self._call(writing(self._complete_tombstone, tombstone(len(outcome))), key)
            if done:
                self.outcomes_not_kept += 1
                log.warning(
                    "Redis store %s is out of memory: an outcome of %d bytes was kept as a "
                    "tombstone (retries get idempotency_outcome_not_kept) key_digest=%s",
                    self.description,
                    len(outcome),
                    key_digest(key),
                )
        if done and self.max_records_per_scope is not None:
            await self._track_quota(scope, name)
        return done

    async def _track_quota(self, scope: str, name: bytes) -> None:
        """Re-score a renewed or completed record in its scope's quota set (only with a quota).

        The set must live at least as long as its records, or a quiet scope would lose its
        count and start afresh while its records still live. Its own round trip, after the
        renewal or completion, so those scripts are untouched by quotas. A failure here is not
        theirs (the lease was extended, the outcome recorded), so it is swallowed; the member
        is then re-scored by the next claim that finds the scope at its quota, while the set
        lives (at least until the lease it was given before).
        """
        with contextlib.suppress(redis_errors.RedisError, *_CONNECTION_ERRORS):
            await self._eval2(self._track, (self.quota_name(scope), name))

    async def release(self, scope: str, key: str, owner: str, *, lapse: bool = False) -> bool:
        name = self.key_name(scope, key)

        async def op(_retrying: bool) -> bool:
            return bool(await self._eval(self._release, name, owner, int(lapse)))

        released = await self._call(op, key)
        if released and lapse:
            # Still counted (lapsed) if it was kept: re-scored from its new expiry.
            if self.max_records_per_scope is not None:
                await self._track_quota(scope, name)
        elif released and self.max_records_per_scope is not None:
            # The released record stops counting now, not when its lease would have ended.
            with contextlib.suppress(redis_errors.RedisError, *_CONNECTION_ERRORS):
                await self._client.zrem(self.quota_name(scope), name)
        return released

    async def forget(self, scope: str, key: str, owner: str) -> bool:
        """Delete the record held by `owner`, in progress or completed: an operator's forced
        release (`idemtools keys release --force`); never part of the call path."""
        name = self.key_name(scope, key)

        async def op(_retrying: bool) -> bool:
            return bool(await self._eval(self._forget, name, owner))

        forgotten = await self._call(op, key)
        if forgotten and self.max_records_per_scope is not None:
            with contextlib.suppress(redis_errors.RedisError, *_CONNECTION_ERRORS):
                await self._client.zrem(self.quota_name(scope), name)
        return forgotten

    async def get(self, scope: str, key: str) -> Record | None:
        name = self.key_name(scope, key)

        async def op(_retrying: bool) -> Record | None:
            reply = await self._eval(self._get, name)
            if reply == 0:
                return None
            return self._record(reply, key)

        return await self._call(op, key)

    async def aclose(self) -> None:
        """Close the client if this store created it (`from_url`); a passed-in one stays open."""
        if self._coalescer is not None:
            await self._coalescer.aclose()
        if self._owns_client:
            await self._client.aclose()


def _on_new_connections(pool: Any, callback: Callable[..., None]) -> None:
    """Have every connection `pool` makes from now on call `callback` on each (re)connect.

    redis-py keeps connect callbacks per connection (`register_connect_callback`, held
    weakly), so the pool's factory registers it on each one it makes."""
    make = getattr(pool, "make_connection", None)
    if make is None:
        return

    def make_connection() -> Any:
        conn = make()
        register = getattr(conn, "register_connect_callback", None)
        if register is not None:
            register(callback)
        return conn

    pool.make_connection = make_connection


def _scope_tag(scope: bytes) -> bytes:
    """32 hex digits naming a scope: its quota set's hash tag (and its records', on Cluster)."""
    return hashlib.sha256(b"scope:" + scope).hexdigest()[:32].encode("ascii")


def _corrupt(key: str, why: str) -> RecordCorruptError:
    return corrupt("Redis", key, why)


def _broken(exc: Exception) -> bool:
    """A broken connection: the driver's connection errors, or its race under a concurrent
    close (`_redis_cluster.driver_fault`)."""
    if isinstance(exc, (AttributeError, TypeError)):
        return cluster.driver_fault(exc)
    return isinstance(exc, _CONNECTION_ERRORS)
