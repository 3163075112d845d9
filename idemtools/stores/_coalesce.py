"""Coalescing of concurrent EVALSHAs into pipelines, for `RedisStore` on a single Redis.

Why: at high concurrency a redis-py asyncio client spends far more CPU per command (packing,
a socket write, a read and parse per reply, connection checkout) than Redis spends running the
script. Operations issued while others are in flight are collected for one event-loop tick and
sent as one pipeline: one socket write, one connection checkout, and the replies read back to
back (what redis-py's `Pipeline(transaction=False)` does, done by hand for less CPU per
command). Nothing about an operation changes: each is still its own atomic script on one key,
and each caller gets its own reply or its own exception.

Rules, each covered by tests/stores/test_redis_coalesce.py:

* **Alone, nothing is added.** An operation issued while none is in flight or waiting is sent
  at once, in the caller's own task, exactly as without coalescing (no extra loop tick, no
  task). Only operations that would otherwise compete for the CPU and the pool wait for the
  next tick, which they would have waited for anyway.
* **Errors are per operation.** An error reply becomes its own operation's exception and the
  replies after it are read as usual: a script error (or NOSCRIPT after a server restart or
  SCRIPT FLUSH) reaches only its own caller, which handles it as it would a single EVALSHA
  (the store loads the script and sends it again). A failure of the whole round trip
  (connection lost, timeout) reaches every caller of the batch, each with its own copy, and
  each retries as the store always does; the connection is dropped, never reused half-read.
* **A cancelled caller cancels only its wait.** The round trip runs in a task of its own, so
  one caller cancelled (a client disconnect) neither breaks the batch nor leaves the shared
  connection half-read; the others get their replies. As with a single EVALSHA, an operation
  that was already sent may still run on the server.
* **Not for Redis Cluster**: a cluster pipeline splits by slot and retries on its own terms;
  `RedisStore` uses this only for a `redis.asyncio.Redis` client.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from redis.asyncio import Redis

__all__ = ["Coalescer"]

_MAX_BATCH = 256
"""Operations per pipeline at most: bounds one reply burst (and one caller's wait behind it)."""

_Pending = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


class Coalescer:
    """EVALSHA through one client; concurrent calls share a pipeline (see the module docstring).

    `evalsha(sha, numkeys, *keys_and_args)` has the contract of `Redis.evalsha`: it returns the
    reply or raises what redis-py raises for that one command (`NoScriptError` included).
    """

    __slots__ = (
        "_checkout_args",
        "_client",
        "_encoding",
        "_in_flight",
        "_loop",
        "_max_batch",
        "_pending",
        "_pool",
        "_tasks",
    )

    def __init__(self, client: Redis, *, max_batch: int = _MAX_BATCH) -> None:
        self._client = client
        pool: Any = client.connection_pool  # its methods are untyped in redis-py
        self._pool = pool
        encoder = pool.get_encoder()
        self._encoding: tuple[str, str] = (encoder.encoding, encoder.encoding_errors)
        self._checkout_args = _checkout_args(pool)
        self._max_batch = max_batch
        self._pending: list[_Pending] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop `_pending` waits on
        self._in_flight = 0  # operations sent and not yet answered
        self._tasks: set[asyncio.Task[None]] = set()

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        pending = self._pending
        if not pending and not self._in_flight:
            # Alone: send it now, in the caller's task (no tick, no task, no future).
            self._in_flight += 1
            try:
                return await self._client.evalsha(sha, numkeys, *keys_and_args)
            finally:
                self._in_flight -= 1
        loop = asyncio.get_running_loop()
        if pending and loop is not self._loop:
            # A batch waits on another event loop (a client must not be shared across loops,
            # but if it is, do not mix them): this one goes alone.
            return await self._client.evalsha(sha, numkeys, *keys_and_args)
        future: asyncio.Future[Any] = loop.create_future()
        pending.append(((sha, numkeys, *keys_and_args), future))
        if len(pending) == 1:
            self._loop = loop
            loop.call_soon(self._flush)
        elif len(pending) >= self._max_batch:
            self._flush()
        return await future

    def _flush(self) -> None:
        batch = self._pending
        if not batch:  # already flushed when it reached `max_batch`
            return
        self._pending = []
        self._in_flight += len(batch)
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Pending]) -> None:
        try:
            try:
                if len(batch) == 1:  # what a pipeline of one would cost, without its setup
                    replies = [await _reply(self._client.evalsha(*batch[0][0]))]
                else:
                    replies = await self._round_trip(batch)
            except BaseException as exc:
                # The whole round trip failed: every caller sees it (and retries on its own).
                for _, future in batch:
                    if not future.done():
                        future.set_exception(_copy(exc))
                if not isinstance(exc, Exception):
                    raise
                return
            for (_, future), reply in zip(batch, replies, strict=True):
                if future.done():  # its caller was cancelled
                    continue
                if isinstance(reply, Exception):
                    future.set_exception(reply)
                else:
                    future.set_result(reply)
        finally:
            self._in_flight -= len(batch)

    async def _round_trip(self, batch: list[_Pending]) -> list[Any]:
        """Send the batch in one write on one pooled connection; read every reply back.

        By hand rather than through redis-py's `Pipeline`, which costs ~60% more CPU per
        command here (its generic packing, per-command bookkeeping): the commands are packed
        directly (RESP, arguments encoded as the client's encoder would), the replies read by
        the connection's own parser, an error reply kept as that operation's exception.
        """
        pool = self._pool
        packed = self._pack(batch)
        connection = await pool.get_connection(*self._checkout_args)
        try:
            await connection.send_packed_command(packed)
            replies: list[Any] = []
            for _ in batch:
                try:
                    replies.append(await connection.read_response())
                except ResponseError as exc:  # this operation's error; the stream stays in step
                    replies.append(exc)
        except BaseException:
            # Replies may be left unread on the socket: it must not serve anyone else.
            await connection.disconnect(nowait=True)
            raise
        finally:
            await pool.release(connection)
        return replies

    def _pack(self, batch: list[_Pending]) -> bytes:
        """RESP arrays of bulk strings, as `Connection.pack_commands` would write them."""
        encoding, errors = self._encoding
        out: list[bytes] = []
        add = out.append
        for args, _ in batch:
            add(b"*%d\r\n$7\r\nEVALSHA\r\n" % (len(args) + 1))
            for arg in args:
                if isinstance(arg, bytes):
                    data = arg
                elif isinstance(arg, str):
                    data = arg.encode(encoding, errors)
                elif type(arg) is int:
                    data = b"%d" % arg
                else:
                    data = self._pool.get_encoder().encode(arg)
                add(b"$%d\r\n%b\r\n" % (len(data), data))
        return b"".join(out)

    async def aclose(self) -> None:
        """Let the batches already sent finish (their callers are waiting for them)."""
        while self._tasks or self._pending:
            if self._pending:
                self._flush()
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _reply(command: Awaitable[Any]) -> Any:
    """A command's reply, or its error reply as the value (as a pipeline keeps it)."""
    try:
        return await command
    except ResponseError as exc:
        return exc


def _checkout_args(pool: Any) -> tuple[str, ...]:
    """redis-py before 5.3 requires a command name to check a connection out; later ones warn."""
    parameter = inspect.signature(pool.get_connection).parameters.get("command_name")
    if parameter is not None and parameter.default is inspect.Parameter.empty:
        return ("EVALSHA",)
    return ()


def _copy(exc: BaseException) -> BaseException:
    """A copy per caller, so tracebacks and `__cause__` chains of one never pile onto another."""
    if isinstance(exc, asyncio.CancelledError):
        return asyncio.CancelledError()
    try:
        return copy.copy(exc)
    except Exception:  # pragma: no cover - an exception that cannot be copied
        return exc
