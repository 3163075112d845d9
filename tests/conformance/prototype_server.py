"""A re-creation of the behaviour of SEP-3182's reference prototype, with the fixture tools.

The prototype (abluva/mcp-request-idempotency-reference) keeps an in-memory dict keyed by the
raw `idempotencyKey` (no scope), fingerprints the arguments with `json.dumps(sort_keys=True)`
(so `1` and `1.0` differ, and the tool name is not part of it), advertises no capability, and
records a result only once the tool has finished (so a duplicate that arrives while the
original runs executes again: no in-progress refusal). Everything else follows the SEP: a
completed duplicate gets the recorded outcome (a JSON-RPC error from `sep3182_throw` included),
other arguments get a conflict error.

A plain stdio JSON-RPC server with no SDK, so that it behaves the same on every mcp release.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from idemtools.conformance.contract import (
    COUNT,
    FAIL,
    FIXTURE_TOOLS,
    RECORD_SLOW,
    SCHEMAS,
    THROW,
    answer_text,
    throw_error,
)

SERVED = (*FIXTURE_TOOLS, THROW)

COUNTS: dict[str, int] = {}
DEDUP: dict[str, dict[str, Any]] = {}  # raw key -> {"fingerprint", "reply"}


def fingerprint(arguments: Any) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True).encode()).hexdigest()


async def execute(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The reply members: {"result": ...} or, for sep3182_throw, {"error": ...}."""
    label = str(arguments.get("label"))
    if name == COUNT:
        n = COUNTS.get(label, 0)
    else:
        COUNTS[label] = n = COUNTS.get(label, 0) + 1
        if name == RECORD_SLOW:
            await asyncio.sleep(int(arguments.get("ms") or 0) / 1000)
    if name == THROW:
        return {"error": throw_error(label, n)}
    text = answer_text(label, n)
    return {"result": {"content": [{"type": "text", "text": text}], "isError": name == FAIL}}


async def call_tool(params: dict[str, Any]) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    if name not in SERVED:
        return {"error": {"code": -32602, "message": f"unknown tool {name}"}}
    key = params.get("idempotencyKey")
    if key is None:
        return await execute(name, arguments)
    fp = fingerprint(arguments)
    cached = DEDUP.get(key)
    if cached is not None:
        if cached["fingerprint"] != fp:
            data = {"type": "idempotency_key_conflict", "idempotencyKey": key}
            message = "idempotencyKey was already used with different arguments"
            return {"error": {"code": -32000, "message": message, "data": data}}
        return dict(cached["reply"])
    reply = await execute(name, arguments)
    DEDUP[key] = {"fingerprint": fp, "reply": reply}
    return reply


async def answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, params = message.get("method"), message.get("params") or {}
    if "id" not in message:
        return None
    if method == "initialize":
        reply: dict[str, Any] = {
            "result": {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "prototype", "version": "0"},
            }
        }
    elif method == "tools/list":
        tools = [{"name": n, "inputSchema": SCHEMAS[n]} for n in SERVED]
        reply = {"result": {"tools": tools}}
    elif method == "tools/call":
        reply = await call_tool(params)
    elif method == "ping":
        reply = {"result": {}}
    else:
        reply = {"error": {"code": -32601, "message": f"method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": message["id"], **reply}


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 24)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()

    async def handle(line: bytes) -> None:
        reply = await answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()

    while line := await reader.readline():
        if line.strip():
            task = asyncio.ensure_future(handle(line))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
