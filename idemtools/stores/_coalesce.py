"""Coalescing of concurrent EVALSHAs into pipelines, for `RedisStore` on a single Redis.

Why: at high concurrency a redis-py asyncio client spends far more CPU per command (packing,
a socket write, a read and parse per reply, connection checkout) than Redis spends running the
script. Operations issued while others are in flight are collected for one event-loop tick and
sent as one pipeline (`transaction=False`): one socket write, one connection checkout, and the
replies read back to back. Nothing about an operation changes: each is still its own atomic
script on one key, and each caller gets its own reply or its own exception.

Rules, each covered by tests/stores/test_redis_coalesce.py:

* **Alone, nothing is added.** An operation issued while none is in flight or waiting is sent
  at once, in the caller's own task, exactly as without coalescing (no extra loop tick, no
  task). Only operations that would otherwise compete for the CPU and the pool wait for the
  next tick, which they would have waited for anyway.
* **Errors are per operation.** The pipeline runs with `raise_on_error=False`: a script error
  (or NOSCRIPT after a server restart or SCRIPT FLUSH) reaches only its own caller, which
  handles it as it would a single EVALSHA (the store loads the script and sends it again). A
  failure of the whole round trip (connection lost, timeout) reaches every caller of the
  batch, each with its own copy, and each retries as the store always does.
* **A cancelled caller cancels only its wait.** The pipeline runs in a task of its own, so one
  caller cancelled (a client disconnect) neither breaks the batch nor leaves the shared
  connection half-read; the others get their replies. As with a single EVALSHA, an operation
  that was already sent may still run on the server.
* **Not for Redis Cluster**: a cluster pipeline splits by slot and retries on its own terms;
  `RedisStore` uses this only for a `redis.asyncio.Redis` client.
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

    __slots__ = ("_client", "_in_flight", "_loop", "_max_batch", "_pending", "_tasks")

    def __init__(self, client: Redis, *, max_batch: int = _MAX_BATCH) -> None:
        self._client = client
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
            if len(batch) == 1:
                args, future = batch[0]
                try:
                    reply = await self._client.evalsha(*args)
                except Exception as exc:
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(reply)
                return
            pipe = self._client.pipeline(transaction=False)
            for args, _ in batch:
                pipe.evalsha(*args)
            try:
                replies = await pipe.execute(raise_on_error=False)
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

    async def aclose(self) -> None:
        """Let the batches already sent finish (their callers are waiting for them)."""
        while self._tasks or self._pending:
            if self._pending:
                self._flush()
            await asyncio.gather(*self._tasks, return_exceptions=True)


def _copy(exc: BaseException) -> BaseException:
    """A copy per caller, so tracebacks and `__cause__` chains of one never pile onto another."""
    if isinstance(exc, asyncio.CancelledError):
        return asyncio.CancelledError()
    try:
        return copy.copy(exc)
    except Exception:  # pragma: no cover - an exception that cannot be copied
        return exc
