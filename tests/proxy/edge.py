"""In-process fixtures for the HTTP proxy's edge tests: an upstream that echoes what it
receives and sets cookies, and the proxy served by uvicorn on a thread (no subprocess, so a
property test can send hundreds of requests in seconds).

The upstream reads bodies as the SDK servers and Express do: `gzip`/`deflate` inflated,
UTF-8 decoded with replacement, JSON parsed; it records every request (headers and the
messages it read), answers each with `Set-Cookie: sid=session-of-<bearer token>`, and runs
- `record {label}`: counts executions per label;
- `echo`: answers the headers it received (cookie, authorization, host, origin);
- `secret`: listed and callable for the bearer token `alice` only; anyone else gets
  `-32602 Unknown tool` (a per-caller tool list).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from idemtools.proxy.config import ProxyConfig
from idemtools.proxy.http import HttpProxy, http_server

TOOLS = ["record", "echo", "secret"]


@dataclass
class Seen:
    """One request the upstream received."""

    method: str
    headers: dict[str, list[str]]
    messages: list[Any]

    def header(self, name: str) -> str | None:
        values = self.headers.get(name.lower())
        return ", ".join(values) if values else None


@dataclass
class EchoUpstream:
    port: int
    seen: list[Seen] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def calls(self) -> list[tuple[Seen, dict[str, Any]]]:
        """Every tools/call the upstream read, with the request that carried it."""
        with self.lock:
            return [
                (request, message)
                for request in self.seen
                for message in request.messages
                if isinstance(message, dict) and message.get("method") == "tools/call"
            ]

    def executions(self, label: str) -> int:
        with self.lock:
            return self.counts.get(label, 0)


def _bearer(value: str | None) -> str:
    return value[7:].strip() if value and value[:7].lower() == "bearer " else ""


def _read(body: bytes, coding: str | None) -> Any:
    """The body as a lenient server reads it; None when it cannot."""
    try:
        for one in reversed([c.strip().lower() for c in (coding or "").split(",") if c.strip()]):
            if one in ("gzip", "x-gzip"):
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
            elif one == "deflate":
                body = zlib.decompress(body)
            elif one != "identity":
                return None
        return json.loads(body.decode("utf-8", errors="replace"))
    except (ValueError, zlib.error):
        return None


def _answer(upstream: EchoUpstream, message: Any, token: str, seen: Seen) -> Any:
    if not isinstance(message, dict) or message.get("id") is None:
        return None
    rid, method = message["id"], message.get("method")
    raw = message.get("params")
    params: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if method == "initialize":
        result: Any = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "echo-upstream", "version": "1.0"},
        }
    elif method == "tools/list":
        names = [n for n in TOOLS if n != "secret" or token == "alice"]
        result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in names]}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        name = params.get("name")
        given = params.get("arguments")
        arguments: dict[str, Any] = given if isinstance(given, dict) else {}
        if name not in TOOLS or (name == "secret" and token != "alice"):
            error = {"code": -32602, "message": f"Unknown tool: {name}"}
            return {"jsonrpc": "2.0", "id": rid, "error": error}
        label = str(arguments.get("label"))
        with upstream.lock:
            upstream.counts[label] = upstream.counts.get(label, 0) + 1
            count = upstream.counts[label]
        if name == "echo":
            text = json.dumps({k: seen.header(k) for k in ("cookie", "authorization", "host")})
        else:
            text = json.dumps({"label": label, "executions": count})
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        error = {"code": -32601, "message": "Method not found"}
        return {"jsonrpc": "2.0", "id": rid, "error": error}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


def _handler(upstream: EchoUpstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: bytes, token: str) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.send_header("set-cookie", f"sid=session-of-{token or 'nobody'}; Path=/")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            headers: dict[str, list[str]] = {}
            for name, value in self.headers.items():
                headers.setdefault(name.lower(), []).append(value)
            token = _bearer(self.headers.get("authorization"))
            parsed = _read(raw, self.headers.get("content-encoding"))
            messages = parsed if isinstance(parsed, list) else [parsed]
            seen = Seen("POST", headers, messages)
            with upstream.lock:
                upstream.seen.append(seen)
            if parsed is None:
                error = {"code": -32700, "message": "Parse error"}
                body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
                self._reply(400, body, token)
                return
            answers = [a for m in messages if (a := _answer(upstream, m, token, seen))]
            if not answers:
                self._reply(202, b"", token)
                return
            out = answers if isinstance(parsed, list) else answers[0]
            self._reply(200, json.dumps(out).encode(), token)

    return Handler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def echo_upstream() -> Iterator[EchoUpstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(EchoUpstream(0)))
    upstream = EchoUpstream(server.server_address[1])
    server.RequestHandlerClass = _handler(upstream)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield upstream
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextlib.contextmanager
def serving(
    upstream: str, config: ProxyConfig | None = None, **options: Any
) -> Iterator[tuple[str, HttpProxy]]:
    """`HttpProxy` in front of `upstream`, served by uvicorn (as `serve_http` configures it)
    on a thread; yields its base URL."""
    port = free_port()
    app = HttpProxy(upstream, config or ProxyConfig(), **options)
    server = http_server(app, f"127.0.0.1:{port}")
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the proxy did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(20)
