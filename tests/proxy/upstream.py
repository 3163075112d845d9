"""A raw JSON-RPC MCP server for the proxy tests: no SDK, no idemtools, starts in milliseconds.

`python upstream.py LOG` serves stdio; `python upstream.py LOG --http PORT` serves plain
JSON over HTTP POST on 127.0.0.1 (no sessions, no auth: the proxy in front verifies callers;
an answer with notifications before it, `slow` with a progressToken, is an SSE stream; a call
with a `status` argument is answered with that HTTP status and no JSON-RPC; with
`--tokens FILE`, a request whose `Authorization: Bearer T` has no line T in FILE, read at each
request, gets HTTP 401: a token is revoked by removing its line).
A batch (a JSON array, MCP 2025-03-26) is taken entry by entry and logged as `{"batch": N}`
before its entries; on stdio each entry is answered on its own, over HTTP in one JSON array.
Every message it receives is appended to LOG as one JSON line (so a test can count executions
across processes and see exactly what was forwarded). On stdio it reads as the Python SDK does:
UTF-8 decoded with replacement, universal newlines (a CR ends a line too); a line it cannot parse
is logged as `{"unparsed": LINE}` and otherwise ignored. Over HTTP it decodes bodies with
replacement too, as `express.json()` does.
Tools:
- `record {label}`: counts executions; answers `{"label", "executions"}` as text.
- `slow {label, ms}`: the same after sleeping `ms` milliseconds (on a thread, so the server
  keeps reading), with a progress notification when the request carries a progressToken.
- `fail {label}`: a JSON-RPC error with data (the tool's own error: recorded and replayed).
- `die {label}`: counts, then the process exits at once (exit status 3), answering nothing.
- `sample {label}`: asks the client for `sampling/createMessage`, answers with its reply.
- `hidden {label}`: callable but not in tools/list (an admin tool); counts, then answers its
  own JSON-RPC error (code 1002).
Anything else in tools/call: JSON-RPC error -32602 "Unknown tool" (and not in tools/list).
`resources/list`, `prompts/get`, `ping` answer fixed values; `notifications/*` are only logged.
Both protocol eras: `server/discover` answers as a 2026-07-28 server, and a request with
`_meta["io.modelcontextprotocol/protocolVersion"]` is answered in that era, as the independent
TypeScript 2026-07-28 servers answer: no `resultType`, and the `serverInfo` stamp in `_meta` only
when the call's arguments say `stamp: true`.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import time
from typing import Any

LOG = sys.argv[1] if len(sys.argv) > 1 else os.devnull
OUT = threading.Lock()
COUNTS: dict[str, int] = {}
WAITING: dict[Any, threading.Event] = {}
REPLIES: dict[Any, Any] = {}
TOOLS = [
    {"name": n, "inputSchema": {"type": "object", "properties": {"label": {"type": "string"}}}}
    for n in ("record", "slow", "fail", "die", "sample")
]


SINK = threading.local()  # HTTP mode: the request thread's answer goes to its response


def send(message: dict[str, Any]) -> None:
    sink = getattr(SINK, "messages", None)
    if sink is not None:
        sink.append(message)
        return
    with OUT:
        sys.stdout.write(json.dumps(message, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def log(message: Any) -> None:
    with OUT, open(LOG, "a", encoding="utf-8") as file:
        file.write(json.dumps(message) + "\n")


def count(label: str) -> int:
    with OUT:
        COUNTS[label] = COUNTS.get(label, 0) + 1
        return COUNTS[label]


def text(label: str, executions: int) -> dict[str, Any]:
    body = json.dumps({"label": label, "executions": executions})
    return {"content": [{"type": "text", "text": body}], "isError": False}


VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
STAMP_KEY = "io.modelcontextprotocol/serverInfo"
SERVER_INFO = {"name": "raw-upstream", "version": "1.0"}


def call(rid: Any, params: dict[str, Any]) -> None:
    name = params.get("name")
    args = params.get("arguments") or {}
    label = str(args.get("label"))
    if name == "hidden":
        count(label)
        error = {"code": 1002, "message": f"hidden {label} failed"}
        send({"jsonrpc": "2.0", "id": rid, "error": error})
        return
    if name not in {t["name"] for t in TOOLS}:
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {"code": -32602, "message": f"Unknown tool: {name}"},
            }
        )
        return
    executions = count(label)
    if name == "die":
        os._exit(3)
    if name == "slow":
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": 0.5, "total": 1.0},
                }
            )
        time.sleep(float(args.get("ms", 0)) / 1000)
    if name == "fail":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {
                    "code": 1001,
                    "message": f"fail {label}",
                    "data": {"executions": executions},
                },
            }
        )
        return
    if name == "sample":
        sid = f"s-{rid}"
        WAITING[sid] = threading.Event()
        send(
            {
                "jsonrpc": "2.0",
                "id": sid,
                "method": "sampling/createMessage",
                "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": label}}],
                    "maxTokens": 5,
                },
            }
        )
        WAITING[sid].wait(10)
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "content": [{"type": "text", "text": json.dumps(REPLIES.get(sid))}],
                    "isError": False,
                },
            }
        )
        return
    result = text(label, executions)
    if VERSION_KEY in (params.get("_meta") or {}) and args.get("stamp") is True:
        result["_meta"] = {STAMP_KEY: SERVER_INFO}
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def authorized(authorization: str) -> bool:
    if "--tokens" not in sys.argv:
        return True
    with open(sys.argv[sys.argv.index("--tokens") + 1]) as file:
        tokens = set(file.read().split())
    return authorization[:7].lower() == "bearer " and authorization[7:].strip() in tokens


def serve_http(port: int) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            message = json.loads(body.decode("utf-8", "replace"))  # as express.json() reads
            if isinstance(message, list):  # a 2025-03-26 batch: one JSON array of answers
                self.batch(message)
                return
            log({**message, "headers": {"authorization": self.headers.get("authorization")}})
            SINK.messages = []
            try:
                if not authorized(self.headers.get("authorization") or ""):
                    self.send_response(401)
                    self.send_header("www-authenticate", 'Bearer error="invalid_token"')
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if message.get("id") is None:
                    self.send_response(202)
                    self.end_headers()
                    return
                status = ((message.get("params") or {}).get("arguments") or {}).get("status")
                if status is not None:  # the HTTP layer refuses (or fails) without JSON-RPC
                    self.send_response(int(status))
                    self.send_header("content-type", "text/plain")
                    self.send_header("www-authenticate", 'Bearer realm="test"')
                    self.send_header("content-length", "7")
                    self.end_headers()
                    self.wfile.write(b"refused")
                    return
                if message.get("method") == "tools/call":
                    call(message["id"], message.get("params") or {})
                else:
                    dispatch(message)
                messages = list(SINK.messages)
            finally:
                SINK.messages = None
            self.send_response(200)
            if len(messages) > 1:  # notifications before the answer: an SSE stream
                data = b"".join(
                    b"event: message\r\ndata: " + json.dumps(m).encode() + b"\r\n\r\n"
                    for m in messages
                )
                self.send_header("content-type", "text/event-stream")
            else:
                data = json.dumps(messages[-1]).encode()
                self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def batch(self, entries: list[Any]) -> None:
            log({"batch": len(entries)})
            answers: list[Any] = []
            for entry in entries:
                log(entry)
                SINK.messages = []
                try:
                    if isinstance(entry, dict) and entry.get("id") is not None:
                        if entry.get("method") == "tools/call":
                            call(entry["id"], entry.get("params") or {})
                        else:
                            dispatch(entry)
                    answers += [m for m in SINK.messages if "method" not in m]
                finally:
                    SINK.messages = None
            data = json.dumps(answers).encode()
            self.send_response(200 if answers else 202)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def main() -> None:
    if "--http" in sys.argv:
        serve_http(int(sys.argv[sys.argv.index("--http") + 1]))
        return
    stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    for line in stdin:
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
        except ValueError:
            log({"unparsed": line})
            continue
        if isinstance(parsed, list):  # a 2025-03-26 batch: each entry taken as if alone
            log({"batch": len(parsed)})
            for entry in parsed:
                take(entry)
            continue
        take(parsed)


def take(message: Any) -> None:
    log(message)
    if not isinstance(message, dict):
        return
    method, rid = message.get("method"), message.get("id")
    if method is None:  # an answer to our own request (sampling)
        REPLIES[rid] = message.get("result")
        if rid in WAITING:
            WAITING[rid].set()
        return
    if rid is None:
        return  # notifications: logged only
    if method == "tools/call":
        threading.Thread(target=call, args=(rid, message.get("params") or {}), daemon=True).start()
        return
    dispatch(message)


def dispatch(message: dict[str, Any]) -> None:
    method, rid = message.get("method"), message.get("id")
    if method == "initialize":
        result: Any = {
            "protocolVersion": message["params"].get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {"listChanged": True}, "resources": {}, "prompts": {}},
            "serverInfo": {"name": "raw-upstream", "version": "1.0"},
            "instructions": "caf\u00e9 \u2603 1.0e3",
        }
    elif method == "server/discover":
        result = {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": SERVER_INFO,
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "resources/list":
        result = {"resources": [{"uri": "test://a", "name": "a", "mimeType": "text/plain"}]}
    elif method == "prompts/get":
        result = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}
    elif method == "ping":
        result = {}
    else:
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {"code": -32601, "message": "Method not found"},
            }
        )
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


if __name__ == "__main__":
    main()
