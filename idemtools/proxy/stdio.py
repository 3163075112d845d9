"""The stdio relay: the proxy is the host's stdio server, and COMMAND is its child.

Both directions are relayed line by line, as received (the bytes of every message the proxy
does not need to change are written unchanged, ids included). The proxy changes three things:

- the `initialize` / `server/discover` result gains `capabilities.tools.idempotency`;
- a keyed `tools/call` is decided by the engine; when it runs, the proxy forwards it with an id
  of its own (`idemtools-proxy:N`, so the answer comes back to the engine, never to the
  client), and the client gets the outcome under its own id;
- a client's `notifications/cancelled` for a keyed call in flight is not forwarded: the
  execution finishes and is recorded, as in the library, and the retry gets the replay.

The child's end is the proxy's end: restarting it would replay `initialize` and lose its
subscriptions, log level and roots. Keyed calls in flight when it exits are recorded as
`idempotency_outcome_unknown`. The host closing stdin, SIGTERM and SIGINT shut down the way
the library does: new keyed calls are refused, the ones in flight are waited for (up to
`shutdown_grace`, leases renewed) and recorded, then the child's stdin is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, BinaryIO

import orjson

from ..engine import Engine
from ..policy import Registry
from ..scopes import CallContext
from ..stores import from_url
from .config import ProxyConfig
from .faults import UpstreamLost
from .keyed import KeyedCalls, ToolCatalog, advertise, is_keyed

__all__ = ["MAX_LINE", "StdioUpstream", "serve_stdio"]

log = logging.getLogger("idemtools.proxy")

MAX_LINE = 64 << 20
"""The longest message (one line) relayed in either direction."""
ID_PREFIX = "idemtools-proxy:"
_ADVERTISED = frozenset({"initialize", "server/discover"})
_CLIENT_MARKERS = (b"idempotencyKey", b"initialize", b"server/discover", b"cancelled", b"\\u")
_UPSTREAM_MARKERS = (ID_PREFIX.encode(), b"list_changed", b"\\u")


def dumps(message: Any) -> bytes:
    """One JSON line; the standard encoder for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(message) + b"\n"
    except TypeError:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        try:  # integers beyond 64 bits: orjson refuses them, and they must stay exact
            return json.loads(line)
        except ValueError:
            return None


def _id_key(rid: Any) -> tuple[str, Any] | None:
    """Hashable identity of a JSON-RPC id: 1 and "1" are different ids."""
    if isinstance(rid, bool) or not isinstance(rid, (str, int, float)):
        return None
    return (type(rid).__name__, rid)


class StdioUpstream:
    """The child's stdin and stdout, seen as request → answer for the engine."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._ids = itertools.count(1)
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.lost: str | None = None
        self._write_lock = asyncio.Lock()

    async def send(self, data: bytes) -> None:
        """Write one line to the child; raises `UpstreamLost(sent=False)` if it cannot."""
        stdin = self.proc.stdin
        if self.lost is not None or stdin is None:
            raise UpstreamLost(self.lost or "the upstream has no stdin", sent=False)
        try:
            stdin.write(data)
            async with self._write_lock:  # one drain at a time (asyncio's drain allows one)
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise UpstreamLost(f"the upstream's stdin is closed ({exc})", sent=False) from None

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        rid = f"{ID_PREFIX}{next(self._ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = future
        try:
            await self.send(
                dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            )
            try:
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:  # a distinct class on Python 3.10
                raise TimeoutError(f"no answer within {timeout} s") from None
        finally:
            self.pending.pop(rid, None)

    def answered(self, message: dict[str, Any]) -> bool:
        """Route an answer to one of the proxy's own requests; False if it is not one."""
        rid = message.get("id")
        if not isinstance(rid, str) or not rid.startswith(ID_PREFIX) or "method" in message:
            return False
        future = self.pending.get(rid)
        if future is not None and not future.done():
            future.set_result(message)
        return True  # a late answer (after max_runtime) is dropped: its outcome is recorded

    def lose(self, reason: str) -> None:
        """The child cannot answer any more: every request waiting on it gets `UpstreamLost`."""
        if self.lost is None:
            self.lost = reason
        for future in self.pending.values():
            if not future.done():
                future.set_exception(UpstreamLost(reason))


async def _client_streams(stdin: BinaryIO, stdout: BinaryIO) -> tuple[asyncio.StreamReader, Any]:
    """Non-blocking reader and writer over the proxy's own stdin and stdout.

    Pipes (how hosts start stdio servers) go through the event loop; anything else (a file, a
    terminal) through a thread, so the proxy works wherever it is started.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except (ValueError, OSError):

        def pump() -> None:
            while chunk := stdin.readline():
                loop.call_soon_threadsafe(reader.feed_data, chunk)
            loop.call_soon_threadsafe(reader.feed_eof)

        threading.Thread(target=pump, name="idemtools-proxy-stdin", daemon=True).start()
    writer: Any
    try:
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, stdout
        )
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
    except (ValueError, OSError):
        writer = _BlockingWriter(stdout)
    return reader, writer


class _BlockingWriter:
    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None


class StdioProxy:
    """One proxy run: the child, the engine, and the two relay loops."""

    def __init__(self, command: Sequence[str], config: ProxyConfig) -> None:
        self.command = list(command)
        self.config = config
        self.store = from_url(config.store)
        self.engine = Engine(self.store, registry=Registry(), default_policy=config.default)
        self.catalog = ToolCatalog()
        self.keyed = KeyedCalls(self.engine, config, self.catalog)
        self.advertising: set[tuple[str, Any]] = set()
        self.in_flight: dict[tuple[str, Any], asyncio.Task[None]] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = asyncio.Event()
        self.stop_reason = ""

    async def run(self, stdin: BinaryIO, stdout: BinaryIO) -> int:
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                limit=MAX_LINE,
            )
        except OSError as exc:
            log.error("cannot start the upstream %r: %s", self.command[0], exc)
            await self.engine.aclose()
            return 127
        self.upstream = StdioUpstream(proc)
        self.reader, self.writer = await _client_streams(stdin, stdout)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
        await self._check_store()
        client = asyncio.create_task(self._from_client())
        server = asyncio.create_task(self._from_upstream())
        await self.stopping.wait()
        client.cancel()
        log.info("proxy stopping: %s", self.stop_reason)
        code = await self._shutdown(proc, server)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        return code

    def stop(self, reason: str) -> None:
        if not self.stopping.is_set():
            self.stop_reason = reason
            self.stopping.set()

    async def _check_store(self) -> None:
        try:
            await asyncio.wait_for(self.store.get("idemtools-proxy", "startup-check"), 10)
        except Exception as exc:
            log.error(
                "the idempotency store does not answer (%s): keyed calls get "
                "idempotency_store_unavailable until it does; unkeyed calls are relayed",
                type(exc).__name__,
            )

    async def _write_client(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            self.stop("the host closed the proxy's stdout")

    async def _from_client(self) -> None:
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                await self._client_message(line)
        except ValueError:  # a line over MAX_LINE
            log.error("a message from the host is over %d bytes; stopping", MAX_LINE)
        except UpstreamLost:
            return  # the upstream side ends the proxy
        self.stop("the host closed stdin")

    async def _client_message(self, line: bytes) -> None:
        # Most messages need nothing from the proxy: those are relayed without being parsed.
        # Any \u escape is parsed, so that no spelling of a member name slips past.
        if not any(marker in line for marker in _CLIENT_MARKERS):
            await self.upstream.send(line)
            return
        message = _loads(line) if line.strip() else None
        if isinstance(message, dict):
            method = message.get("method")
            if is_keyed(message):
                self._start_keyed(message)
                return
            if method in _ADVERTISED:
                rid = _id_key(message.get("id"))
                if rid is not None:
                    self.advertising.add(rid)
            elif method == "notifications/cancelled":
                params = message.get("params")
                target = _id_key(params.get("requestId")) if isinstance(params, dict) else None
                if target is not None and target in self.in_flight:
                    # The keyed execution goes on and is recorded; the retry gets the replay.
                    return
        await self.upstream.send(line)

    def _start_keyed(self, message: dict[str, Any]) -> None:
        rid = _id_key(message.get("id"))
        context = CallContext(
            transport="stdio",
            tool=message["params"].get("name"),
            arguments=message["params"].get("arguments"),
        )

        async def answer() -> None:
            try:
                reply = await self.keyed.answer(message, context, self.upstream)
            except Exception:  # never a silent drop: the host gets an error
                log.exception("keyed call failed inside the proxy")
                reply = {
                    "jsonrpc": "2.0",
                    "id": message.get("id"),
                    "error": {"code": -32603, "message": "idemtools proxy internal error"},
                }
            finally:
                if rid is not None:
                    self.in_flight.pop(rid, None)
            await self._write_client(dumps(reply))

        task = asyncio.create_task(answer())
        if rid is not None:
            self.in_flight[rid] = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _from_upstream(self) -> None:
        stdout = self.upstream.proc.stdout
        assert stdout is not None
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                await self._upstream_message(line)
        except ValueError:
            log.error("a message from the upstream is over %d bytes; stopping", MAX_LINE)
        self.upstream.lose("the upstream server exited or closed its stdout")
        self.stop("the upstream exited")

    async def _upstream_message(self, line: bytes) -> None:
        if not self.advertising and not any(marker in line for marker in _UPSTREAM_MARKERS):
            await self._write_client(line)
            return
        message = _loads(line) if line.strip() else None
        if isinstance(message, dict):
            if self.upstream.answered(message):
                return
            if message.get("method") == "notifications/tools/list_changed":
                self.catalog.changed()
            elif "method" not in message and self.advertising:
                rid = _id_key(message.get("id"))
                if rid in self.advertising:
                    self.advertising.discard(rid)
                    if advertise(message):
                        line = dumps(message)
        await self._write_client(line)

    async def _shutdown(self, proc: asyncio.subprocess.Process, server: asyncio.Task[None]) -> int:
        grace = self.config.shutdown_grace
        drained = await self.engine.drain(grace)
        if self.tasks:  # their answers: written once recorded
            await asyncio.wait(set(self.tasks), timeout=5)
        if not drained:
            log.error("shutdown: keyed calls still running after %.0f s; see above", grace)
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server, 5)
        await self.engine.aclose()
        with contextlib.suppress(Exception):
            self.writer.close()
        code = proc.returncode or 0
        if self.stop_reason == "the upstream exited":
            return code if code >= 0 else 128 - code
        return 0


async def serve_stdio(
    command: Sequence[str],
    config: ProxyConfig,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> int:
    """Relay between this process's stdio and COMMAND's; returns the exit code."""
    proxy = StdioProxy(command, config)
    return await proxy.run(stdin or sys.stdin.buffer, stdout or sys.stdout.buffer)
