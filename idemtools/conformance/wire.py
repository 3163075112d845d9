"""Raw JSON-RPC to a server the kit did not build: stdio (a child process) or streamable HTTP.

The kit speaks the wire itself, with no MCP SDK, so that what it sends is exactly what a test
means: the equivalence checks send argument *text* (key order, whitespace, escapes, number
spellings) that no SDK would let through unchanged. Each `Wire` is one connection in one
protocol era: `2025-11-25` (an `initialize` handshake, then a session) or `2026-07-28` (no
handshake; every request carries its `_meta` and, over HTTP, the standard headers).

A target may be hostile or broken, and the kit must still end and say what happened: every
request has a whole-response deadline (`timeout`, sending included, not per read) inside the
run's overall `Budget`; a message (stdio line, HTTP body or SSE stream) over `max_message`
bytes is discarded and reported as such; the stdio reader never waits on a write (answers to
the server's own requests go through a bounded outbox, and are dropped when it is full), so a
flood of server requests cannot deadlock it. What the target sent instead of an answer
(garbage, unknown ids, its own requests) is counted in `Noise` and named when a request fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import os
import re
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "LEGACY",
    "MODERN",
    "RAW_TEXT",
    "Budget",
    "DeadlineReached",
    "HttpWire",
    "Noise",
    "Raw",
    "StdioWire",
    "TargetGone",
    "Wire",
    "WireError",
    "encode",
]

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
CLIENT_INFO = {"name": "idemtools-conformance", "version": "1"}
DEFAULT_MAX_MESSAGE = 16 << 20  # a fixture answer is ~100 bytes; a big tools/list a few MiB
RAW_TEXT = "rawText"  # the answer's JSON text as received, beside the parsed members
FLOOD = 1000  # this many messages the kit did not ask for, while one request waited: a flood


class WireError(Exception):
    """The target cannot be reached or does not speak JSON-RPC (exit code 2)."""


class TargetGone(WireError):
    """The target went away mid-run (its process ended, or it refuses connections): nothing
    after this can be checked, so the run stops."""


class DeadlineReached(WireError):
    """The run's overall deadline (--deadline) passed: the run stops and reports what it had
    decided."""


class Raw(str):
    """JSON text sent as written (not re-serialized), for the equivalence checks."""


def encode(value: Any) -> str:
    """JSON text of `value`, with `Raw` parts inserted verbatim."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {encode(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(encode(v) for v in value) + "]"
    return json.dumps(value)


@dataclass
class Budget:
    """The run's overall deadline, shared by every connection of one run (None: no deadline)."""

    seconds: float | None = None

    def __post_init__(self) -> None:
        self.ends = None if self.seconds is None else time.monotonic() + self.seconds

    def left(self) -> float | None:
        return None if self.ends is None else self.ends - time.monotonic()

    def reached(self, what: str) -> DeadlineReached:
        return DeadlineReached(f"the run's deadline ({self.seconds:g} s, --deadline) passed {what}")


def _sample(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    text = text.strip()
    return repr(text if len(text) <= 60 else text[:57] + "...")


@dataclass
class Noise:
    """What a target sent that was not an answer the kit waits for, counted (never stored)."""

    garbage: int = 0
    garbage_first: str = ""
    wrong_ids: int = 0
    wrong_id_first: str = ""
    late: int = 0
    oversized: int = 0
    requests: int = 0
    methods: dict[str, int] = field(default_factory=dict)
    answered: int = 0
    ignored: int = 0
    notifications: int = 0

    def saw_garbage(self, data: bytes | str) -> None:
        self.garbage += 1
        self.garbage_first = self.garbage_first or _sample(data)

    def saw_wrong_id(self, rid: Any) -> None:
        self.wrong_ids += 1
        self.wrong_id_first = self.wrong_id_first or _sample(json.dumps(rid))

    def saw_request(self, method: Any) -> None:
        self.requests += 1
        name = method if isinstance(method, str) else "?"
        if name in self.methods or len(self.methods) < 8:
            self.methods[name] = self.methods.get(name, 0) + 1

    def snapshot(self) -> Noise:
        return replace(self, methods=dict(self.methods))

    def since(self, before: Noise) -> str:
        """`; meanwhile the target sent ...` for what arrived after `before`, or ''."""
        parts: list[str] = []
        if (n := self.garbage - before.garbage) > 0:
            first = self.garbage_first if not before.garbage else "..."
            parts.append(
                f"{n} messages that are not JSON-RPC (not JSON or not an object; first: {first})"
            )
        if (n := self.wrong_ids - before.wrong_ids) > 0:
            first = self.wrong_id_first if not before.wrong_ids else "..."
            parts.append(f"{n} answers with ids the kit never sent (first: {first})")
        if (n := self.late - before.late) > 0:
            parts.append(f"{n} late answers to requests the kit had given up on")
        if (n := self.oversized - before.oversized) > 0:
            parts.append(f"{n} messages over the size cap (discarded)")
        if (n := self.requests - before.requests) > 0:
            counts = {m: c - before.methods.get(m, 0) for m, c in self.methods.items()}
            methods = ", ".join(f"{m} x{c}" for m, c in sorted(counts.items()) if c > 0)
            flood = "a flood of " if n >= FLOOD else ""
            parts.append(
                f"{flood}{n} requests of its own ({methods}; the kit answered "
                f"{self.answered - before.answered}, ignored {self.ignored - before.ignored})"
            )
        if (n := self.notifications - before.notifications) >= FLOOD:
            parts.append(f"a flood of {n} notifications")
        return f"; meanwhile the target sent {', '.join(parts)}" if parts else ""


def modern_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def initialize_params() -> dict[str, Any]:
    return {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}


@dataclass
class Wire:
    """One connection in one era. `request` returns the JSON-RPC response object."""

    era: str
    timeout: float
    budget: Budget = field(default_factory=Budget)
    max_message: int = DEFAULT_MAX_MESSAGE

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self.opened: dict[str, Any] = {}  # the initialize or server/discover result
        self.noise = Noise()
        self._unsent: set[int] = set()  # requests still being written when their time ran out

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, str]:
        rid = next(self._ids)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if self.era == MODERN and method != "initialize":
            params = dict(params or {})
            params["_meta"] = {**modern_meta(), **dict(params.get("_meta") or {})}
        if params is not None:
            body["params"] = params
        return rid, encode(body)

    def _cap(self) -> str:
        return f"over the {self.max_message}-byte cap (--max-message-bytes)"

    async def _bounded(self, what: str, rid: int | None, exchange: Awaitable[Any]) -> Any:
        """`exchange` (send, then read the whole answer) within `timeout` and the run's budget."""
        before = self.noise.snapshot()
        left = self.budget.left()
        by_deadline = left is not None and left < self.timeout
        if left is not None and left <= 0:
            if asyncio.iscoroutine(exchange):
                exchange.close()
            raise self.budget.reached(f"before {what}")
        limit = left if by_deadline and left is not None else self.timeout
        try:
            return await asyncio.wait_for(exchange, limit)
        except asyncio.TimeoutError:
            unsent = rid is not None and rid in self._unsent
            if rid is not None:
                self._unsent.discard(rid)
            if by_deadline:
                raise self.budget.reached(f"while waiting for {what}") from None
            if unsent:
                raise WireError(
                    f"could not send {what} within {self.timeout:g} s: the target does not "
                    f"read its input{self.noise.since(before)}"
                ) from None
            raise WireError(
                f"no answer to {what} within {self.timeout:g} s{self.noise.since(before)}"
            ) from None

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid, text = self._message(method, params)
        reply: dict[str, Any] = await self._bounded(
            method, rid, self._exchange(rid, method, params, text)
        )
        return reply

    async def _exchange(
        self, rid: int, method: str, params: dict[str, Any] | None, text: str
    ) -> dict[str, Any]:
        raise NotImplementedError

    async def requests_together(
        self, method: str, many: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Several requests sent at the same instant (a race a server must survive): here,
        concurrently; over stdio, in one write."""
        return list(await asyncio.gather(*(self.request(method, p) for p in many)))

    async def notify(self, method: str) -> None:
        await self._bounded(method, None, self._notify(method))

    async def _notify(self, method: str) -> None:
        raise NotImplementedError

    async def open(self) -> dict[str, Any]:
        """Handshake for this era; returns the `initialize` / `server/discover` result.

        Raises WireError when the server does not serve this era.
        """
        if self.era == MODERN:
            reply = await self.request("server/discover", {})
        else:
            reply = await self.request("initialize", initialize_params())
        result = reply.get("result")
        if not isinstance(result, dict):
            error = reply.get("error") or {k: v for k, v in reply.items() if k != RAW_TEXT}
            raise WireError(f"{self.era} handshake refused: {json.dumps(error)[:300]}")
        self.opened = result
        if self.era == LEGACY:
            self._after_initialize(result)
            await self.notify("notifications/initialized")
        return result

    def _after_initialize(self, result: dict[str, Any]) -> None:
        pass

    async def aclose(self) -> None:
        raise NotImplementedError


_ID = re.compile(rb'"id"\s*:\s*(-?\d+)')
_KEEP = 4096  # bytes kept of each end of an oversized line: where its id is


class StdioWire(Wire):
    """A child process speaking newline-delimited JSON-RPC on stdin/stdout.

    One reader task owns stdout and never awaits a write; one writer task sends the answers to
    the server's own requests from a bounded outbox. The kit's requests write under a lock,
    within their deadline.
    """

    def __init__(
        self,
        command: Sequence[str],
        era: str,
        timeout: float,
        budget: Budget | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
    ) -> None:
        super().__init__(era, timeout, budget or Budget(), max_message)
        self.command = list(command)
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._abandoned: collections.deque[int] = collections.deque(maxlen=1024)
        self._tasks: list[asyncio.Task[None]] = []
        self._stderr: asyncio.Task[None] | None = None
        self._outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=64)
        self._gone: str | None = None
        self._tail = b""
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=os.environ.copy(),
            )
        except OSError as exc:
            raise WireError(f"cannot start {self.command[0]!r}: {exc.strerror or exc}") from None
        self._stderr = asyncio.ensure_future(self._drain_stderr())
        self._tasks = [self._stderr, asyncio.ensure_future(self._read())]
        self._tasks.append(asyncio.ensure_future(self._send_outbox()))

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        with contextlib.suppress(Exception):
            while chunk := await self._proc.stderr.read(65536):
                self._tail = (self._tail + chunk)[-2000:]

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with contextlib.suppress(Exception):  # a broken pipe is the end of the stream too
            await self._read_lines(self._proc.stdout)
        await self._ended()

    async def _read_lines(self, stdout: asyncio.StreamReader) -> None:
        line = bytearray()
        over = 0  # > 0: inside a line over the cap, this many bytes so far (not kept)
        head = tail = b""
        while chunk := await stdout.read(1 << 16):
            *complete, rest = chunk.split(b"\n")
            for i, piece in enumerate([*complete, rest]):
                if over:
                    over += len(piece)
                    tail = (tail + piece)[-_KEEP:]
                else:
                    line += piece
                    if len(line) > self.max_message:
                        over, head, tail = len(line), bytes(line[:_KEEP]), bytes(line[-_KEEP:])
                        line = bytearray()
                if i == len(complete):
                    break  # `rest`: the line goes on in the next chunk
                if over:
                    self._oversized(head + tail, over)
                    over, head, tail = 0, b"", b""
                else:
                    self._line(bytes(line))
                line = bytearray()

    def _line(self, data: bytes) -> None:
        if not data.strip():
            return
        try:
            message = json.loads(data)
        except ValueError:
            self.noise.saw_garbage(data)
            return
        if not isinstance(message, dict):
            self.noise.saw_garbage(data)
            return
        if "method" in message:
            if "id" in message:
                self._server_request(message)
            else:
                self.noise.notifications += 1
            return
        rid = message.get("id")
        future = self._pending.pop(rid, None) if type(rid) is int else None
        if future is None:
            if type(rid) is int and rid in self._abandoned:
                self.noise.late += 1
            else:
                self.noise.saw_wrong_id(rid)
            return
        if not future.done():
            message[RAW_TEXT] = data.decode("utf-8", "replace")
            future.set_result(message)

    def _oversized(self, ends: bytes, size: int) -> None:
        """A line over the cap was discarded: fail the request it answers (its id is at one
        end of the line), or every waiting request when neither end holds an id."""
        self.noise.oversized += 1
        ids = {int(m) for m in _ID.findall(ends)}
        hit = [rid for rid in self._pending if rid in ids or not ids]
        for rid in hit:
            future = self._pending.pop(rid)
            self._abandoned.append(rid)
            if not future.done():
                future.set_exception(
                    WireError(
                        f"the server wrote a stdout line of {size} bytes, {self._cap()}; "
                        "the kit discarded it"
                    )
                )

    def _server_request(self, message: dict[str, Any]) -> None:
        # ping gets its empty result; anything else the kit does not offer (it declared no
        # client capabilities). Never awaited here: a full outbox drops the answer.
        self.noise.saw_request(message.get("method"))
        if message.get("method") == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        else:
            error = {"code": -32601, "message": "not supported by the conformance kit"}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        try:
            self._outbox.put_nowait(json.dumps(reply))
        except asyncio.QueueFull:
            self.noise.ignored += 1
        else:
            self.noise.answered += 1

    async def _send_outbox(self) -> None:
        with contextlib.suppress(WireError):
            while True:
                await self._write(await self._outbox.get())

    async def _ended(self) -> None:
        proc = self._proc
        assert proc is not None
        # Let the last words and the exit status of a dying server arrive.
        with contextlib.suppress(Exception):
            if self._stderr is not None:
                await asyncio.wait_for(asyncio.shield(self._stderr), 1)
            await asyncio.wait_for(proc.wait(), 1)
        status = proc.returncode
        what = (
            f"the server process ended (exit status {status})"
            if status is not None
            else "the server closed its stdout"
        )
        self._gone = what + self._stderr_tail()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(TargetGone(self._gone))
        self._pending.clear()

    def _stderr_tail(self) -> str:
        text = self._tail.decode("utf-8", "replace").strip()
        return f"; its stderr ends with: {text[-500:]}" if text else ""

    async def _write(self, text: str) -> None:
        proc = self._proc
        if self._gone is not None:
            raise TargetGone(self._gone)
        if proc is None or proc.stdin is None or proc.returncode is not None:
            raise TargetGone(f"the server process is not running{self._stderr_tail()}")
        async with self._lock:
            try:
                proc.stdin.write(text.encode() + b"\n")
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                raise TargetGone(f"the server process closed stdin{self._stderr_tail()}") from None

    async def _exchange(
        self, rid: int, method: str, params: dict[str, Any] | None, text: str
    ) -> dict[str, Any]:
        if self._gone is not None:
            raise TargetGone(self._gone)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            self._unsent.add(rid)
            await self._write(text)
            self._unsent.discard(rid)
            return await future
        finally:
            if self._pending.pop(rid, None) is not None:
                self._abandoned.append(rid)

    async def requests_together(
        self, method: str, many: Sequence[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """One write holding every request: the server reads them in one chunk."""
        if self._gone is not None:
            raise TargetGone(self._gone)
        messages = [self._message(method, params) for params in many]
        loop = asyncio.get_running_loop()
        futures: dict[int, asyncio.Future[dict[str, Any]]] = {}
        for rid, _text in messages:
            futures[rid] = self._pending[rid] = loop.create_future()

        async def exchange() -> list[dict[str, Any]]:
            first = messages[0][0]
            self._unsent.add(first)
            await self._write("\n".join(text for _rid, text in messages))
            self._unsent.discard(first)
            return [await futures[rid] for rid, _text in messages]

        try:
            replies: list[dict[str, Any]] = await self._bounded(method, messages[0][0], exchange())
            return replies
        finally:
            for rid, _text in messages:
                if self._pending.pop(rid, None) is not None:
                    self._abandoned.append(rid)

    async def _notify(self, method: str) -> None:
        await self._write(json.dumps({"jsonrpc": "2.0", "method": method}))

    async def aclose(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        left = self.budget.left()
        grace = 3.0 if left is None or left > 0 else 0.5  # past the deadline: no politeness
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 3)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _SseEvents:
    """Incremental `text/event-stream` parsing: bytes in, the `data` of each complete event out.
    Only `data:` lines matter to the kit; comments, `event:` and `id:` lines are skipped."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end]).rstrip(b"\r")
            del self._buffer[: end + 1]
            if line.startswith(b"data:"):
                self._data.append(line[5:].lstrip())
            elif not line.strip() and self._data:
                events.append(b"\n".join(self._data))
                self._data = []
        return events

    def close(self) -> list[bytes]:
        return self.feed(b"\n\n")


def _sse_reply(text: str, rid: Any) -> dict[str, Any] | None:
    """The answer to `rid` in a complete SSE body (the first event with that id, not a request)."""
    events = _SseEvents()
    for data in [*events.feed(text.encode()), *events.close()]:
        with contextlib.suppress(ValueError):
            event = json.loads(data)
            if isinstance(event, dict) and event.get("id") == rid and "method" not in event:
                return event
    return None


class HttpWire(Wire):
    """POSTs to a streamable HTTP endpoint (JSON or SSE answers), with the caller's headers.

    Bodies are streamed and counted against the cap; an SSE answer is returned as soon as the
    event with the request's id arrives, whatever the stream does after it.
    """

    def __init__(
        self,
        url: str,
        era: str,
        timeout: float,
        headers: Mapping[str, str] | None = None,
        budget: Budget | None = None,
        max_message: int = DEFAULT_MAX_MESSAGE,
    ) -> None:
        super().__init__(era, timeout, budget or Budget(), max_message)
        self.url = url
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **dict(headers or {}),
        }
        self._client = httpx.AsyncClient(timeout=timeout)
        self._session_header: str | None = None

    async def start(self) -> None:
        pass

    def _headers(self, method: str, params: dict[str, Any] | None) -> dict[str, str]:
        headers = dict(self.headers)
        if self.era == MODERN:
            headers["MCP-Protocol-Version"] = MODERN
            headers["Mcp-Method"] = method
            name = (params or {}).get("name")
            if method == "tools/call" and isinstance(name, str):
                headers["Mcp-Name"] = name
        return headers

    def _unreachable(self, exc: httpx.HTTPError) -> WireError:
        if isinstance(exc, httpx.TimeoutException):
            return WireError(f"no answer from {self.url} within {self.timeout:g} s")
        if isinstance(exc, httpx.ConnectError) and self.opened:
            return TargetGone(f"{self.url} stopped accepting connections: {exc}")
        return WireError(f"cannot reach {self.url}: {exc}")

    async def _exchange(
        self, rid: int, method: str, params: dict[str, Any] | None, text: str
    ) -> dict[str, Any]:
        try:
            async with self._client.stream(
                "POST", self.url, content=text.encode(), headers=self._headers(method, params)
            ) as response:
                self._session_header = response.headers.get("mcp-session-id")
                kind = response.headers.get("content-type", "")
                if kind.startswith("text/event-stream"):
                    reply, body = await self._read_sse(response, rid, method), b""
                else:
                    body = await self._read_body(response, method)
                    reply = self._parse_body(body)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        if reply is not None and "jsonrpc" not in reply:
            reply = None  # e.g. an OAuth error body: not a JSON-RPC answer
        if reply is None:
            shown = body[:200].decode("utf-8", "replace")
            message = f"HTTP {response.status_code} with no JSON-RPC answer: {shown}"
            if response.status_code in (401, 403):
                message += " (authentication: pass --header 'Authorization: Bearer ...')"
            reply = {"error": {"code": None, "message": message}}
        reply["httpStatus"] = response.status_code
        return reply

    async def _read_body(self, response: httpx.Response, method: str) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_message:
            raise WireError(
                f"the answer to {method} is an HTTP body of {declared} bytes, {self._cap()}"
            )
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > self.max_message:
                raise WireError(f"the answer to {method} is an HTTP body {self._cap()}")
        return bytes(body)

    @staticmethod
    def _parse_body(body: bytes) -> dict[str, Any] | None:
        if not body:
            return None
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        parsed[RAW_TEXT] = body.decode("utf-8", "replace")
        return parsed

    async def _read_sse(
        self, response: httpx.Response, rid: int, method: str
    ) -> dict[str, Any] | None:
        events, total = _SseEvents(), 0
        stream = response.aiter_bytes()
        ended = False
        while not ended:
            chunk = await anext(stream, None)
            if chunk is None:
                ended, datas = True, events.close()
            else:
                total += len(chunk)
                if total > self.max_message:
                    raise WireError(
                        f"the answer to {method} is an SSE stream {self._cap()} with no answer "
                        f"in it{self.noise.since(Noise())}"
                    )
                datas = events.feed(chunk)
            for data in datas:
                found = self._event(data, rid)
                if found is not None:
                    return found
        return None

    def _event(self, data: bytes, rid: int) -> dict[str, Any] | None:
        try:
            event = json.loads(data)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self.noise.saw_garbage(data)
            return None
        if "method" in event:  # the kit declared no client capabilities: nothing to answer
            if "id" in event:
                self.noise.saw_request(event.get("method"))
                self.noise.ignored += 1
            else:
                self.noise.notifications += 1
            return None
        if event.get("id") != rid or type(event.get("id")) is not int:
            self.noise.saw_wrong_id(event.get("id"))
            return None
        event[RAW_TEXT] = data.decode("utf-8", "replace")
        return event

    def _after_initialize(self, result: dict[str, Any]) -> None:
        if self._session_header:
            self.headers["Mcp-Session-Id"] = self._session_header
        version = result.get("protocolVersion")
        if isinstance(version, str):
            self.headers["MCP-Protocol-Version"] = version

    async def _notify(self, method: str) -> None:
        text = json.dumps({"jsonrpc": "2.0", "method": method})
        try:
            async with self._client.stream(
                "POST", self.url, content=text.encode(), headers=self._headers(method, None)
            ) as response:
                await self._read_body(response, method)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None

    async def aclose(self) -> None:
        session = self.headers.get("Mcp-Session-Id")
        if session:
            with contextlib.suppress(httpx.HTTPError, asyncio.TimeoutError):
                await asyncio.wait_for(
                    self._client.delete(self.url, headers=self.headers), min(self.timeout, 5)
                )
        await self._client.aclose()
