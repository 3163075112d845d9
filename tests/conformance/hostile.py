"""Hostile targets for the kit: they handshake and list the fixtures, then misbehave on
`tools/call`. Raw JSON-RPC, no SDK, so that the misbehaviour is exactly what the test means.

    python hostile.py MODE              # stdio
    python hostile.py --http PORT MODE  # HTTP on 127.0.0.1 (raw asyncio, no framework)

stdio modes: `hang` (never answers a tools/call), `giant` (answers the first tools/call with one
line over 16 MiB, then answers like a server without idempotency), `garbage` (answers every
tools/call with lines that are not JSON, never an answer), `wrong-id` (answers every tools/call
with another id), `flood` (on the first tools/call, sends requests of its own forever without
reading its stdin), `flood-answer` (before the first answer, 20000 requests of its own without
reading its stdin, then like a server without idempotency), `crash` (answers two keyed
tools/calls, then exits with status 3: mid-run, after the kit's unkeyed fixture probe).
HTTP modes: `drip` (every tools/call answer is an SSE stream that never ends, one comment every
0.1 s), `bigbody` (an endless SSE body as fast as it can write).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

TOOLS = ["sep3182_record", "sep3182_record_slow", "sep3182_fail", "sep3182_count"]
GIANT = (16 << 20) + (1 << 20)


def tools_list() -> dict[str, Any]:
    schema = {"type": "object", "properties": {"label": {"type": "string"}}}
    return {"tools": [{"name": n, "inputSchema": schema} for n in TOOLS]}


class Counter:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.calls = 0
        self.keyed = 0

    def answer(self, params: dict[str, Any]) -> dict[str, Any]:
        """A fixture server without idempotency: every call executes."""
        label = str((params.get("arguments") or {}).get("label"))
        if params.get("name") != "sep3182_count":
            self.counts[label] = self.counts.get(label, 0) + 1
        text = json.dumps({"label": label, "executions": self.counts.get(label, 0)})
        fail = params.get("name") == "sep3182_fail"
        return {"content": [{"type": "text", "text": text}], "isError": fail}


def handshake(method: str) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {"idempotency": {}}},
            "serverInfo": {"name": "hostile", "version": "1"},
        }
    if method == "tools/list":
        return tools_list()
    return None


def stdio(mode: str) -> None:
    out = sys.stdout.buffer
    counter = Counter()

    def send(message: dict[str, Any]) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    for line in sys.stdin.buffer:
        message = json.loads(line)
        method, rid = message.get("method"), message.get("id")
        if rid is None or method is None:
            continue
        result = handshake(method)
        if result is not None:
            send({"jsonrpc": "2.0", "id": rid, "result": result})
            continue
        if method != "tools/call":
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
            continue
        counter.calls += 1
        counter.keyed += "idempotencyKey" in (message.get("params") or {})
        if mode == "hang":
            continue
        if mode == "giant" and counter.calls == 1:
            text = "x" * GIANT
            body = {"content": [{"type": "text", "text": text}]}
            send({"jsonrpc": "2.0", "id": rid, "result": body})
            continue
        if mode == "garbage":
            for n in range(200):
                out.write(b"\x00\xffnot json at all %d {\n" % n)
            out.flush()
            continue
        if mode == "wrong-id":
            send(
                {"jsonrpc": "2.0", "id": 10_000 + rid, "result": counter.answer(message["params"])}
            )
            continue
        if mode == "flood":
            n = 0
            while True:  # never reads stdin again: a kit that blocks writing answers deadlocks
                n += 1
                send({"jsonrpc": "2.0", "id": f"s{n}", "method": "ping"})
        if mode == "flood-answer" and counter.calls == 1:  # more than two pipes hold
            for n in range(20_000):
                out.write(b'{"jsonrpc": "2.0", "id": "p%d-%d", "method": "ping"}\n' % (rid, n))
            out.flush()
        if mode == "crash" and counter.keyed > 2:
            print("hostile: crashing now", file=sys.stderr, flush=True)
            sys.exit(3)
        send({"jsonrpc": "2.0", "id": rid, "result": counter.answer(message["params"])})


async def http(port: int, mode: str) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.decode("latin-1").split("\r\n"):
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                body = json.loads(await reader.readexactly(length)) if length else {}
                method, rid = body.get("method"), body.get("id")
                result = handshake(method) if method else None
                if rid is None:
                    writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
                elif result is not None or method != "tools/call":
                    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": rid}
                    if result is None:
                        answer["error"] = {"code": -32601, "message": str(method)}
                    else:
                        answer["result"] = result
                    data = json.dumps(answer).encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        b"Cache-Control: no-cache\r\n\r\n"
                    )
                    chunk = b": drip\n\n" if mode == "drip" else b": " + b"x" * 65536 + b"\n\n"
                    while True:
                        writer.write(chunk)
                        await writer.drain()
                        if mode == "drip":
                            await asyncio.sleep(0.1)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
        if argv[0] == "--http":
            asyncio.run(http(int(argv[1]), argv[2]))
        else:
            stdio(argv[0])


if __name__ == "__main__":
    main(sys.argv[1:])
