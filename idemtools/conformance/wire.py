"""Raw JSON-RPC to a server the kit did not build: stdio (a child process) or streamable HTTP.

The kit speaks the wire itself, with no MCP SDK, so that what it sends is exactly what a test
means: the equivalence checks send argument *text* (key order, whitespace, escapes, number
spellings) that no SDK would let through unchanged. Each `Wire` is one connection in one
protocol era: `2025-11-25` (an `initialize` handshake, then a session) or `2026-07-28` (no
handshake; every request carries its `_meta` and, over HTTP, the standard headers).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "LEGACY",
    "MODERN",
    "HttpWire",
    "Raw",
    "StdioWire",
    "Wire",
    "WireError",
    "encode",
]

RAW_TEXT = "rawText"  # the answer's JSON text as received, beside its parsed members
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
CLIENT_INFO = {"name": "idemtools-conformance", "version": "1"}


class WireError(Exception):
    """The target cannot be reached or does not speak JSON-RPC (exit code 2)."""


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

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self.opened: dict[str, Any] = {}  # the initialize or server/discover result

    def _message(self, method: str, params: dict[str, Any] | None) -> tuple[int, str]:
        rid = next(self._ids)
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if self.era == MODERN and method != "initialize":
            params = dict(params or {})
            params["_meta"] = {**modern_meta(), **dict(params.get("_meta") or {})}
        if params is not None:
            body["params"] = params
        return rid, encode(body)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    async def notify(self, method: str) -> None:
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
            error = reply.get("error") or reply
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


class StdioWire(Wire):
    """A child process speaking newline-delimited JSON-RPC on stdin/stdout."""

    def __init__(self, command: Sequence[str], era: str, timeout: float) -> None:
        super().__init__(era, timeout)
        self.command = list(command)
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[Any, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._stderr: asyncio.Task[None] | None = None
        self._tail = b""
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=64 << 20,
                env=os.environ.copy(),
            )
        except OSError as exc:
            raise WireError(f"cannot start {self.command[0]!r}: {exc.strerror or exc}") from None
        self._reader = asyncio.ensure_future(self._read())
        self._stderr = asyncio.ensure_future(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        while chunk := await self._proc.stderr.read(65536):
            self._tail = (self._tail + chunk)[-2000:]

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        try:
            while line := await self._proc.stdout.readline():
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # a log line on stdout: not ours to judge here
                if not isinstance(message, dict):
                    continue
                if "method" in message and "id" in message:
                    await self._answer_server_request(message)
                    continue
                message[RAW_TEXT] = line.decode("utf-8", "replace").rstrip("\r\n")
                future = self._pending.pop(message.get("id"), None)
                if future is not None and not future.done():
                    future.set_result(message)
        finally:
            if self._stderr is not None:  # let the last words of a dying server arrive
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(self._stderr), 1)
            problem = WireError(f"the server process ended{self._stderr_tail()}")
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(problem)
            self._pending.clear()

    def _stderr_tail(self) -> str:
        text = self._tail.decode("utf-8", "replace").strip()
        return f"; its stderr ends with: {text[-500:]}" if text else ""

    async def _answer_server_request(self, message: dict[str, Any]) -> None:
        # ping gets its empty result; anything else the kit does not offer (it declared no
        # client capabilities).
        if message.get("method") == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"], "result": {}}
        else:
            error = {"code": -32601, "message": "not supported by the conformance kit"}
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": error}
        await self._write(json.dumps(reply))

    async def _write(self, text: str) -> None:
        if self._proc is None or self._proc.stdin is None or self._proc.returncode is not None:
            raise WireError(f"the server process is not running{self._stderr_tail()}")
        async with self._lock:
            try:
                self._proc.stdin.write(text.encode() + b"\n")
                await self._proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                raise WireError(f"the server process closed stdin{self._stderr_tail()}") from None

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid, text = self._message(method, params)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        await self._write(text)
        try:
            return await asyncio.wait_for(future, self.timeout)
        except asyncio.TimeoutError:
            self._pending.pop(rid, None)
            raise WireError(f"no answer to {method} within {self.timeout:g} s") from None

    async def notify(self, method: str) -> None:
        await self._write(json.dumps({"jsonrpc": "2.0", "method": method}))

    async def aclose(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(Exception):
                proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 3)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 3)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        for task in (self._reader, self._stderr):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _sse_reply(text: str, rid: Any, raw: list[str] | None = None) -> dict[str, Any] | None:
    data: list[str] = []
    found: dict[str, Any] | None = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line.strip() and data:
            with contextlib.suppress(ValueError):
                event = json.loads("\n".join(data))
                if isinstance(event, dict) and event.get("id") == rid and "method" not in event:
                    found = event
                    if raw is not None:  # the event's JSON text, for the raw-identity check
                        raw[:] = ["\n".join(data)]
            data = []
    return found


class HttpWire(Wire):
    """POSTs to a streamable HTTP endpoint (JSON or SSE answers), with the caller's headers."""

    def __init__(
        self, url: str, era: str, timeout: float, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(era, timeout)
        self.url = url
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **dict(headers or {}),
        }
        self._client = httpx.AsyncClient(timeout=timeout)

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

    async def _post(self, text: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return await self._client.post(self.url, content=text.encode(), headers=headers)
        except httpx.TimeoutException:
            raise WireError(f"no answer from {self.url} within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise WireError(f"cannot reach {self.url}: {exc}") from None

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        rid, text = self._message(method, params)
        response = await self._post(text, self._headers(method, params))
        self._last_response = response
        kind = response.headers.get("content-type", "")
        reply: dict[str, Any] | None = None
        raw: list[str] = []
        if kind.startswith("text/event-stream"):
            reply = _sse_reply(response.text, rid, raw)
        elif response.content:
            with contextlib.suppress(ValueError):
                parsed = response.json()
                reply = parsed if isinstance(parsed, dict) else None
                raw = [response.text]
        if reply is not None and raw:
            reply[RAW_TEXT] = raw[0]
        if reply is not None and "jsonrpc" not in reply:
            reply = None  # e.g. an OAuth error body: not a JSON-RPC answer
        if reply is None:
            message = f"HTTP {response.status_code} with no JSON-RPC answer: {response.text[:200]}"
            if response.status_code in (401, 403):
                message += " (authentication: pass --header 'Authorization: Bearer ...')"
            reply = {"error": {"code": None, "message": message}}
        reply["httpStatus"] = response.status_code
        return reply

    def _after_initialize(self, result: dict[str, Any]) -> None:
        session = self._last_response.headers.get("mcp-session-id")
        if session:
            self.headers["Mcp-Session-Id"] = session
        version = result.get("protocolVersion")
        if isinstance(version, str):
            self.headers["MCP-Protocol-Version"] = version

    async def notify(self, method: str) -> None:
        text = json.dumps({"jsonrpc": "2.0", "method": method})
        await self._post(text, self._headers(method, None))

    async def aclose(self) -> None:
        session = self.headers.get("Mcp-Session-Id")
        if session:
            with contextlib.suppress(httpx.HTTPError):
                await self._client.delete(self.url, headers=self.headers)
        await self._client.aclose()
