"""The stdio relay: the proxy is the host's stdio server, and COMMAND is its child.

Both directions are relayed line by line, as received (the bytes of every message the proxy
does not need to change are written unchanged, ids included). Every line from the host is
parsed first: one the proxy cannot parse, or refuses, is answered by the proxy and never
relayed (see `ingress`). The proxy changes four things:

- the `initialize` / `server/discover` result gains `capabilities.tools.idempotency`;
- a keyed `tools/call` is decided by the engine; when it runs, the proxy forwards it with an id
  of its own (`idemtools-proxy:N`, so the answer comes back to the engine, never to the
  client), and the client gets the outcome under its own id;
- a client's `notifications/cancelled` for a keyed call in flight is not forwarded: the
  execution finishes and is recorded, as in the library, and the retry gets the replay;
- a client request whose id is in the proxy's own namespace (a string starting with
  `idemtools-proxy:`) goes upstream under a fresh id of the proxy's and is answered under its
  own: on the upstream's wire every id in that namespace is one the proxy issued, so no client
  id can take the answer to a keyed call, and no keyed call the client's.

The child's end is the proxy's end: restarting it would replay `initialize` and lose its
subscriptions, log level and roots. Keyed calls in flight when it exits are recorded as
`idempotency_outcome_unknown`. The host closing stdin, SIGTERM and SIGINT shut down the way
the library does: new keyed calls are refused, the ones in flight are waited for (up to
`shutdown_grace`, leases renewed) and recorded, then the child's stdin is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import signal
import sys
import threading
from collections.abc import Coroutine, Sequence
from typing import Any, BinaryIO, TypeGuard, cast

from ..engine import Engine
from ..engine.runtime import start_eagerly
from ..policy import Registry
from ..scopes import CallContext
from ..stores import from_url
from ..stores.default import proxy_default_store
from . import jsonread, jsonwrite
from .batch import Batch, Kind, cancel_target, invalid, kind, needs_split
from .config import ProxyConfig
from .faults import UpstreamLost, unavailable_error
from .ingress import Refused, admit
from .keyed import KeyedCalls, ToolCatalog, advertise, is_keyed

__all__ = ["MAX_LINE", "StdioUpstream", "serve_stdio"]

log = logging.getLogger("idemtools.proxy")

MAX_LINE = 64 << 20
"""The longest message (one line) relayed in either direction."""
ID_PREFIX = "idemtools-proxy:"
_ADVERTISED = frozenset({"initialize", "server/discover"})
_PREFIX_BYTES = ID_PREFIX.encode()


def dumps(message: Any) -> bytes:
    """One JSON line (`jsonwrite.dumps`: exact for every value the reader reads)."""
    return jsonwrite.dumps(message) + b"\n"


def _loads(line: bytes) -> Any:
    try:
        return jsonread.loads(line)
    except ValueError:
        return None


def _internal_error(message: dict[str, Any], exc: BaseException | None = None) -> bytes:
    """Never a silent drop: the host gets an error for a keyed call the proxy failed on."""
    log.error("keyed call failed inside the proxy", exc_info=exc or True)
    error = {"code": -32603, "message": "idemtools proxy internal error"}
    return dumps({"jsonrpc": "2.0", "id": message.get("id"), "error": error})


def _id_key(rid: Any) -> tuple[str, Any] | None:
    """Hashable identity of a JSON-RPC id: 1 and "1" are different ids."""
    if isinstance(rid, bool) or not isinstance(rid, (str, int, float)):
        return None
    return (type(rid).__name__, rid)


READ_SIZE = 1 << 16
"""Bytes asked per read. asyncio's pipes ask 256 KiB, above glibc's mmap threshold: every read
then maps and unmaps a fresh buffer, which costs more than relaying the line itself."""
HIGH_WATER = 1 << 20
"""Bytes queued towards a slow reader before the other side's reading pauses (back-pressure)."""


class _Lines:
    """Splits a byte stream into lines, handing whole chunks over when nothing needs parsing."""

    def __init__(self, on_line: Any, on_chunk: Any, needs_look: Any, on_marked: Any) -> None:
        self.buffer = bytearray()
        self.on_line = on_line
        self.on_chunk = on_chunk
        self.needs_look = needs_look
        self.on_marked = on_marked

    def feed(self, data: bytes) -> bool:
        """False when a line is over MAX_LINE (the stream is then unusable)."""
        if not self.buffer and data.endswith(b"\n"):
            if not self.needs_look(data):
                self.on_chunk(data)  # the common case: whole lines, none to act on, one write
                return True
            if data.find(b"\n") == len(data) - 1:
                self.on_marked(data)  # one whole line to act on (a keyed call): no copies
                return True
        self.buffer += data
        start = 0
        buffer = self.buffer
        while (end := buffer.find(b"\n", start)) >= 0:
            self.on_line(bytes(buffer[start : end + 1]))
            start = end + 1
        del buffer[:start]
        return len(buffer) <= MAX_LINE

    def rest(self) -> None:
        """The stream ended: a last line without its newline is still a message."""
        if self.buffer:
            line, self.buffer = bytes(self.buffer), bytearray()
            self.on_line(line)


class StdioUpstream:
    """The child's stdin and stdout, seen as request → answer for the engine.

    Writes go straight to the pipe's transport: a line is queued, never awaited; the reading
    side pauses when more than HIGH_WATER bytes are waiting for the child.
    """

    def __init__(self, stdin: asyncio.WriteTransport, stdout: asyncio.ReadTransport) -> None:
        self.stdin = stdin
        self.stdout = stdout
        self._ids = itertools.count(1)
        self.issued = 0
        """The proxy's ids so far: `idemtools-proxy:1` to `:issued`, its requests and aliases."""
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.lost: str | None = None

    def new_id(self) -> str:
        """A fresh id in the proxy's namespace (for its own requests and for client aliases)."""
        self.issued = next(self._ids)
        return f"{ID_PREFIX}{self.issued}"

    def issued_by_proxy(self, rid: str) -> bool:
        number = rid[len(ID_PREFIX) :]
        return number.isdigit() and number[0] != "0" and int(number) <= self.issued

    def write(self, data: bytes) -> None:
        """Queue one line for the child; raises `UpstreamLost(sent=False)` if it cannot."""
        if self.lost is not None or self.stdin.is_closing():
            raise UpstreamLost(self.lost or "the upstream's stdin is closed", sent=False)
        self.stdin.write(data)

    async def send(self, data: bytes) -> None:
        self.write(data)

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        rid = self.new_id()
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[rid] = future
        try:
            self.write(dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}))
            try:
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError:  # a distinct class on Python 3.10
                raise TimeoutError(f"no answer within {timeout} s") from None
        finally:
            self.pending.pop(rid, None)

    def answered(self, message: dict[str, Any]) -> bool:
        """Route an answer to a request of the proxy's own that is still waiting; False if it
        is not one (the caller routes it on)."""
        rid = message.get("id")
        if not isinstance(rid, str) or "method" in message:
            return False
        future = self.pending.get(rid)
        if future is None:
            return False
        if not future.done():
            future.set_result(message)
        return True

    def lose(self, reason: str) -> None:
        """The child cannot answer any more: every request waiting on it gets `UpstreamLost`."""
        if self.lost is None:
            self.lost = reason
        for future in self.pending.values():
            if not future.done():
                future.set_exception(UpstreamLost(reason))


class _ChildOut(asyncio.Protocol):
    """The child's stdout, handed to the proxy as it arrives (no reader task, no readline).

    The child's pipes are the proxy's own `os.pipe()`s connected as plain pipe transports, not
    asyncio's subprocess transport: that one defers every chunk by a `call_soon`, one more
    turn of the loop per message."""

    def __init__(self, proxy: StdioProxy) -> None:
        self.proxy = proxy
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.proxy.from_upstream(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
            self.proxy.upstream_closed()


class _ChildIn(asyncio.Protocol):
    def __init__(self, proxy: StdioProxy) -> None:
        self.proxy = proxy

    def pause_writing(self) -> None:  # the child's stdin is full: stop reading the host
        self.proxy.pause_client()

    def resume_writing(self) -> None:
        self.proxy.resume_client()


class _ClientIn(asyncio.Protocol):
    def __init__(self, proxy: StdioProxy) -> None:
        self.proxy = proxy

    def data_received(self, data: bytes) -> None:
        self.proxy.from_client(data)

    def eof_received(self) -> bool:
        self.proxy.client_closed()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.client_closed()


class _ClientOut(asyncio.Protocol):
    def __init__(self, proxy: StdioProxy) -> None:
        self.proxy = proxy

    def pause_writing(self) -> None:  # the host reads slowly: stop reading the child
        self.proxy.pause_upstream(True)

    def resume_writing(self) -> None:
        self.proxy.pause_upstream(False)

    def connection_lost(self, exc: Exception | None) -> None:
        self.proxy.stop("the host closed the proxy's stdout")


class _BlockingWriter:
    """The proxy's stdout when it is not a pipe (a file, a terminal)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.out.flush()

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        return None


def _read_size(transport: Any) -> None:
    # A class attribute of asyncio's Unix pipe transport (`max_size`); elsewhere, nothing.
    if isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = READ_SIZE


def _every_line(data: bytes) -> bool:
    # Every line from the host is parsed: what the proxy cannot parse is never relayed.
    return True


def _ours(rid: Any) -> TypeGuard[str]:
    """An id in the proxy's namespace."""
    return isinstance(rid, str) and rid.startswith(ID_PREFIX)


class StdioProxy:
    """One proxy run: the child, the engine, and the two relay directions.

    Both directions are protocol callbacks: a line that needs nothing from the proxy (decided
    on its bytes, before any JSON parse) is written to the other side's transport in the same
    callback it arrived in. Only keyed calls become tasks (the engine awaits the store).
    """

    def __init__(self, command: Sequence[str], config: ProxyConfig) -> None:
        self.command = list(command)
        self.config = config
        self.store = (
            from_url(config.store) if config.store is not None else proxy_default_store(command)
        )
        self.engine = Engine(self.store, registry=Registry(), default_policy=config.default)
        self.catalog = ToolCatalog()
        self.keyed = KeyedCalls(self.engine, config, self.catalog)
        self.advertising: set[tuple[str, Any]] = set()
        self.batch_waiting: dict[tuple[str, Any], list[tuple[Batch, int, bool, Any]]] = {}
        """Ids of requests forwarded from a split batch: their answers go into its response."""
        self.in_flight: dict[tuple[str, Any], asyncio.Task[Any]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stopping = asyncio.Event()
        self.stop_reason = ""
        self.client_in: asyncio.ReadTransport | None = None
        self.writer: Any = None
        self.client_done = False
        self.aliases: dict[str, tuple[Any, bool]] = {}
        """Proxy ids standing in for client ids in the proxy's namespace, to the client's id
        (and whether its answer is advertised: an `initialize` / `server/discover`)."""
        self.alias_of: dict[str, str] = {}
        """The other way: a client id in the proxy's namespace, in flight, to its alias."""
        self.client_lines = _Lines(
            self._client_message, self._to_upstream, _every_line, self._client_message
        )
        self.upstream_lines = _Lines(
            self._upstream_message, self.write_client, self._upstream_looks, self._upstream_parse
        )

    async def run(self, stdin: BinaryIO, stdout: BinaryIO) -> int:
        loop = self.loop = asyncio.get_running_loop()
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command, stdin=child_in, stdout=child_out
            )
        except OSError as exc:
            for fd in (child_in, to_child, from_child, child_out):
                os.close(fd)
            log.error("cannot start the upstream %r: %s", self.command[0], exc)
            await self.engine.aclose()
            return 127
        os.close(child_in)
        os.close(child_out)
        writing, _ = await loop.connect_write_pipe(
            lambda: _ChildIn(self), os.fdopen(to_child, "wb", buffering=0)
        )
        self.child = _ChildOut(self)
        child = self.child
        reading, _ = await loop.connect_read_pipe(
            lambda: child, os.fdopen(from_child, "rb", buffering=0)
        )
        assert isinstance(writing, asyncio.WriteTransport)
        assert isinstance(reading, asyncio.ReadTransport)
        _read_size(reading)
        self.upstream = StdioUpstream(writing, reading)
        await self._client_streams(stdin, stdout)
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
        await self._check_store()
        await self._start_client()
        await self.stopping.wait()
        self.client_done = True
        if self.client_in is not None:
            with contextlib.suppress(Exception):
                self.client_in.pause_reading()
        log.info("proxy stopping: %s", self.stop_reason)
        code = await self._shutdown()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
        return code

    async def _client_streams(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        """Transports over the proxy's own stdin and stdout.

        Pipes (how hosts start stdio servers) go through the event loop; anything else (a file,
        a terminal) through a thread, so the proxy works wherever it is started.
        """
        loop = asyncio.get_running_loop()
        self._stdin = stdin
        try:
            self.writer, _ = await loop.connect_write_pipe(lambda: _ClientOut(self), stdout)
        except (ValueError, OSError):
            self.writer = _BlockingWriter(stdout)

    async def _start_client(self) -> None:
        loop = asyncio.get_running_loop()
        stdin = self._stdin
        try:
            self.client_in, _ = await loop.connect_read_pipe(lambda: _ClientIn(self), stdin)
            _read_size(self.client_in)
        except (ValueError, OSError):

            def pump() -> None:
                while chunk := stdin.readline():
                    loop.call_soon_threadsafe(self.from_client, chunk)
                loop.call_soon_threadsafe(self.client_closed)

            threading.Thread(target=pump, name="idemtools-proxy-stdin", daemon=True).start()

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

    # -- flow control --------------------------------------------------------------------

    def pause_client(self) -> None:
        if self.client_in is not None and not self.client_done:
            with contextlib.suppress(Exception):
                self.client_in.pause_reading()

    def resume_client(self) -> None:
        if self.client_in is not None and not self.client_done:
            with contextlib.suppress(Exception):
                self.client_in.resume_reading()

    def pause_upstream(self, pause: bool) -> None:
        with contextlib.suppress(Exception):
            if pause:
                self.upstream.stdout.pause_reading()
            else:
                self.upstream.stdout.resume_reading()

    # -- host → child --------------------------------------------------------------------

    def from_client(self, data: bytes) -> None:
        if self.client_done:
            return
        if not self.client_lines.feed(data):
            log.error("a message from the host is over %d bytes; stopping", MAX_LINE)
            self.client_done = True
            self.stop("the host sent a message over MAX_LINE")

    def client_closed(self) -> None:
        if not self.client_done:
            self.client_lines.rest()
            self.client_done = True
            self.stop("the host closed stdin")

    def _to_upstream(self, data: bytes) -> None:
        try:
            self.upstream.write(data)
        except UpstreamLost:
            self.client_done = True  # the upstream side ends the proxy

    def _client_message(self, line: bytes) -> None:
        """One line from the host: parsed, then relayed as it came, decided, or answered."""
        body = line[:-1] if line.endswith(b"\n") else line
        if body.endswith(b"\r"):
            body = body[:-1]
        if not body.strip(b" \t\r"):
            self._to_upstream(line)  # a blank line carries no message
            return
        message = admit(body)
        if isinstance(message, Refused):
            self.write_client(dumps(message.response))
            return
        if b"\r" in body:
            # A CR is JSON whitespace, and a line end to upstreams that read universal newlines
            # (the Python SDK): the same value, re-serialized, is one line to every reader.
            line = dumps(message)
        if isinstance(message, list) and message:
            if needs_split(message, self._keyed_in_flight, self._must_rewrite):
                self._split(message)
                return
        elif isinstance(message, dict):
            method = message.get("method")
            if is_keyed(message):
                self._start_keyed(message)
                return
            rid = message.get("id")
            if method is not None and _ours(rid):
                self._to_upstream(self._aliased(message))
                return
            if method in _ADVERTISED:
                key = _id_key(rid)
                if key is not None:
                    self.advertising.add(key)
            elif method == "notifications/cancelled":
                forward = self._cancel(message)
                if forward is not None:
                    self._to_upstream(line if forward is message else dumps(forward))
                return
        self._to_upstream(line)

    def _keyed_in_flight(self, target: Any) -> bool:
        return _id_key(target) in self.in_flight

    def _must_rewrite(self, entry: Any) -> bool:
        """A batch entry with an id in the proxy's namespace, or a cancellation of one."""
        if not isinstance(entry, dict):
            return False
        return ("method" in entry and _ours(entry.get("id"))) or _ours(cancel_target(entry))

    def _aliased(self, request: dict[str, Any]) -> bytes:
        """A client request whose id is in the proxy's namespace, under a fresh proxy id."""
        alias = self.upstream.new_id()
        self.aliases[alias] = (request["id"], request.get("method") in _ADVERTISED)
        self.alias_of[request["id"]] = alias
        return dumps({**request, "id": alias})

    def _cancel(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """What to forward for a client's `notifications/cancelled` (None: nothing).

        A keyed call in flight is not cancelled: it goes on and is recorded, and the retry
        gets the replay. A request of the client's that went upstream under an alias is
        cancelled under that alias; any other id in the proxy's namespace is not the client's
        to cancel."""
        target = cancel_target(message)
        if _id_key(target) in self.in_flight:
            return None
        if not _ours(target):
            return message
        alias = self.alias_of.get(target)
        if alias is None:
            return None
        return {**message, "params": {**message["params"], "requestId": alias}}

    def _split(self, entries: list[Any]) -> None:
        """A batch holding a keyed call: keyed entries through the engine, the rest forwarded
        one by one (ids preserved), one batch response for all of them (see `batch`)."""
        batch = Batch(lambda array: self.write_client(array + b"\n"))
        for entry in entries:
            what = kind(entry)
            if what is Kind.KEYED:
                index = batch.slot()
                self._start_keyed(entry, lambda data, i=index: batch.fill(i, data[:-1]))
            elif what is Kind.INVALID:
                batch.fill(batch.slot(), dumps(invalid(entry))[:-1])
            elif what is Kind.REQUEST and (rid := _id_key(entry["id"])) is not None:
                index = batch.slot()
                original = entry["id"]
                if _ours(original):  # as on its own: upstream under an alias
                    entry = {**entry, "id": self.upstream.new_id()}
                    rid = (str.__name__, entry["id"])
                try:
                    self.upstream.write(dumps(entry))
                except UpstreamLost as exc:  # never sent: nothing ran
                    error = unavailable_error(exc.reason, sent=exc.sent)
                    answer = {"jsonrpc": "2.0", "id": original, "error": error}
                    batch.fill(index, dumps(answer)[:-1])
                    continue
                waiting = self.batch_waiting.setdefault(rid, [])
                waiting.append((batch, index, entry.get("method") in _ADVERTISED, original))
            else:
                forward = self._cancel(entry) if cancel_target(entry) is not None else entry
                if forward is not None:  # as on its own
                    self._to_upstream(dumps(forward))
        batch.seal()

    def _start_keyed(self, message: dict[str, Any], deliver: Any = None) -> None:
        deliver = deliver or self.write_client
        params = message["params"]
        context = CallContext(
            transport="stdio", tool=params.get("name"), arguments=params.get("arguments")
        )
        # Eagerly, as the engine starts executions: a replay from a store that answers without
        # suspending (MemoryStore) is written before this returns, no loop turn, no task left.
        coro = self.keyed.answer(message, context, self.upstream)
        try:
            started = start_eagerly(self.loop, cast("Coroutine[Any, Any, Any]", coro))
        except Exception:
            deliver(_internal_error(message))
            return
        if not isinstance(started, asyncio.Task):
            deliver(dumps(started))
            return
        task: asyncio.Task[dict[str, Any]] = started
        rid = _id_key(message.get("id"))
        if rid is not None:
            self.in_flight[rid] = task
        self.tasks.add(task)
        task.add_done_callback(functools.partial(self._keyed_done, message, rid, deliver))

    def _keyed_done(
        self,
        message: dict[str, Any],
        rid: tuple[str, Any] | None,
        deliver: Any,
        task: asyncio.Task[dict[str, Any]],
    ) -> None:
        self.tasks.discard(task)
        if rid is not None and self.in_flight.get(rid) is task:
            del self.in_flight[rid]
        if task.cancelled():
            return
        exc = task.exception()
        deliver(_internal_error(message, exc) if exc is not None else dumps(task.result()))

    # -- child → host --------------------------------------------------------------------

    def write_client(self, data: bytes) -> None:
        writer = self.writer
        if writer.is_closing():
            self.stop("the host closed the proxy's stdout")
            return
        try:
            writer.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.stop("the host closed the proxy's stdout")

    def _upstream_looks(self, data: bytes) -> bool:
        return (
            bool(self.advertising)
            or bool(self.batch_waiting)
            or _PREFIX_BYTES in data
            or b"list_changed" in data
            or b"\\u" in data
        )

    def from_upstream(self, data: bytes) -> None:
        if not self.upstream_lines.feed(data):
            log.error("a message from the upstream is over %d bytes; stopping", MAX_LINE)
            self.upstream.stdout.close()

    def upstream_closed(self) -> None:
        self.upstream_lines.rest()
        self.upstream.lose("the upstream server exited or closed its stdout")
        waiting, self.batch_waiting = self.batch_waiting, {}
        for slots in waiting.values():  # unkeyed entries of split batches: never answered
            for batch, index, _, original in slots:
                error = unavailable_error("the upstream exited before answering", sent=True)
                answer = {"jsonrpc": "2.0", "id": original, "error": error}
                batch.fill(index, dumps(answer)[:-1])
        self.stop("the upstream exited")

    def _upstream_message(self, line: bytes) -> None:
        if not self._upstream_looks(line):
            self.write_client(line)
            return
        self._upstream_parse(line)

    def _upstream_parse(self, line: bytes) -> None:
        message = _loads(line)
        if isinstance(message, dict):
            if self.upstream.answered(message):
                return
            if "method" not in message and self.batch_waiting and self._batch_answer(message, line):
                return
            rid = message.get("id")
            if "method" not in message and _ours(rid):
                if rid in self.aliases:  # a client request sent under an alias: its own id back
                    original, advertised = self.aliases.pop(rid)
                    self.alias_of.pop(original, None)
                    message["id"] = original
                    if advertised:
                        advertise(message)
                    self.write_client(dumps(message))
                    return
                if self.upstream.issued_by_proxy(rid):
                    return  # a late answer (after max_runtime): its outcome is recorded
            if message.get("method") == "notifications/tools/list_changed":
                self.catalog.changed()
            elif "method" not in message and self.advertising:
                rid = _id_key(message.get("id"))
                if rid in self.advertising:
                    self.advertising.discard(rid)
                    if advertise(message):
                        line = dumps(message)
        self.write_client(line)

    def _batch_answer(self, message: dict[str, Any], line: bytes) -> bool:
        """Put the answer to an entry forwarded from a split batch into that batch's response."""
        rid = _id_key(message.get("id"))
        waiting = self.batch_waiting.get(rid) if rid is not None else None
        if not waiting or rid is None:
            return False
        batch, index, advertised, original = waiting.pop(0)
        if not waiting:
            del self.batch_waiting[rid]
        if original != message.get("id") or type(original) is not type(message.get("id")):
            message["id"] = original
            line = dumps(message)
        if advertised and advertise(message):
            line = dumps(message)
        batch.fill(index, line.rstrip(b"\r\n"))
        return True

    # -- shutdown ------------------------------------------------------------------------

    async def _shutdown(self) -> int:
        grace = self.config.shutdown_grace
        drained = await self.engine.drain(grace)
        if self.tasks:  # their answers: written once recorded
            await asyncio.wait(set(self.tasks), timeout=5)
        if not drained:
            log.error("shutdown: keyed calls still running after %.0f s; see above", grace)
        with contextlib.suppress(Exception):
            self.upstream.stdin.close()
        proc = self.proc
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
            await asyncio.wait_for(asyncio.shield(self.child.closed), 5)
        self.upstream.stdout.close()
        await self.engine.aclose()
        with contextlib.suppress(Exception):
            if not self.writer.is_closing():
                await self._flush_client()
            self.writer.close()
        code = proc.returncode or 0
        if self.stop_reason == "the upstream exited":
            return code if code >= 0 else 128 - code
        return 0

    async def _flush_client(self) -> None:
        """Let what is queued for the host be written before the transport closes."""
        writer = self.writer
        if isinstance(writer, asyncio.WriteTransport):
            for _ in range(500):
                if writer.get_write_buffer_size() == 0:
                    return
                await asyncio.sleep(0.01)


async def serve_stdio(
    command: Sequence[str],
    config: ProxyConfig,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> int:
    """Relay between this process's stdio and COMMAND's; returns the exit code."""
    proxy = StdioProxy(command, config)
    return await proxy.run(stdin or sys.stdin.buffer, stdout or sys.stdout.buffer)
