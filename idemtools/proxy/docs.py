"""`idemtools proxy --docs`: the retention page of a proxied server.

The page is the library's (`idemtools.docs`), built from what the proxy would serve with: the
same config file and flags (so the policies are the ones a keyed call gets), the proxy's store
and engine (the error codes and limits), and the tools the upstream lists right now (its
`tools/list`, every page). The upstream is started (stdio) or asked (HTTP) once, initialized,
listed and left; nothing is called.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..docs.model import ServerDoc, document
from ..engine import Engine
from ..policy import Registry
from ..stores import SQLiteStore, from_url
from ..stores.base import Store
from ..stores.default import default_store_path
from .config import ProxyConfig

__all__ = ["Listing", "UpstreamError", "describe_proxy", "tools_over_http", "tools_over_stdio"]

LEGACY = "2025-11-25"
_INITIALIZE = {
    "protocolVersion": LEGACY,
    "capabilities": {},
    "clientInfo": {"name": "idemtools-proxy-docs", "version": "1"},
}


class UpstreamError(RuntimeError):
    """The upstream could not be listed (not started, no answer, an error answer)."""


@dataclass(frozen=True)
class Listing:
    """What the page is built from: the upstream's tools and the name it gives itself."""

    tools: list[dict[str, Any]]
    name: str | None
    """`serverInfo.name` from its `initialize` answer: the page's default title (a command
    line would put absolute paths, and a URL its query, on a published page)."""


def _server_name(result: Mapping[str, Any]) -> str | None:
    info = result.get("serverInfo")
    name = info.get("name") if isinstance(info, dict) else None
    return name.strip() if isinstance(name, str) and name.strip() else None


def _pages(first: Mapping[str, Any] | None) -> str | None:
    cursor = (first or {}).get("nextCursor")
    return cursor if isinstance(cursor, str) and cursor else None


async def tools_over_stdio(command: Sequence[str], timeout: float = 30) -> Listing:
    """Start COMMAND, `initialize` it, read every page of `tools/list`, close its stdin."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        raise UpstreamError(f"cannot start the upstream {command[0]!r}: {exc}") from None
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout
    ids = iter(range(1, 1 << 30))

    async def request(method: str, params: dict[str, Any]) -> Any:
        rid = next(ids)
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()
        while True:
            line = await stdout.readline()
            if not line:
                raise UpstreamError(f"the upstream exited before answering {method}")
            with contextlib.suppress(ValueError):
                answer = json.loads(line)
                if isinstance(answer, dict) and answer.get("id") == rid and "method" not in answer:
                    return _result(answer, method)

    async def listing() -> Listing:
        name = _server_name(await request("initialize", _INITIALIZE))
        stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        tools: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        while True:
            page = await request("tools/list", params)
            tools += [t for t in page.get("tools", []) if isinstance(t, dict)]
            if (cursor := _pages(page)) is None:
                return Listing(tools, name)
            params = {"cursor": cursor}

    try:
        return await asyncio.wait_for(listing(), timeout)
    except asyncio.TimeoutError:
        raise UpstreamError(f"the upstream did not list its tools within {timeout:.0f} s") from None
    finally:
        with contextlib.suppress(Exception):
            stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _result(answer: Mapping[str, Any], method: str) -> dict[str, Any]:
    if "error" in answer:
        raise UpstreamError(f"the upstream refused {method}: {answer['error']}")
    result = answer.get("result")
    if not isinstance(result, dict):
        raise UpstreamError(f"the upstream's answer to {method} is malformed")
    return result


async def tools_over_http(
    url: str, headers: Mapping[str, str] | None = None, timeout: float = 30
) -> Listing:
    """`initialize` (2025-11-25, a session if the upstream makes one), every page of
    `tools/list`, then end the session. JSON and SSE answers are both read."""
    import httpx

    base = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        **(headers or {}),
    }
    async with httpx.AsyncClient(timeout=timeout) as client:
        rid = 0

        async def post(method: str, params: dict[str, Any] | None, extra: dict[str, str]) -> Any:
            nonlocal rid
            body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
            if params is not None:
                rid += 1
                body |= {"id": rid, "params": params}
            response = await client.post(url, json=body, headers={**base, **extra})
            if params is None:
                return response
            response.raise_for_status()
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                for line in response.text.splitlines():
                    if line.startswith("data:"):
                        with contextlib.suppress(ValueError):
                            answer = json.loads(line[5:])
                            if isinstance(answer, dict) and answer.get("id") == rid:
                                return response, _result(answer, method)
                raise UpstreamError(f"no answer to {method} in the upstream's event stream")
            return response, _result(response.json(), method)

        try:
            response, initialized = await post("initialize", _INITIALIZE, {})
            session = response.headers.get("mcp-session-id")
            extra = {"mcp-protocol-version": LEGACY}
            if session:
                extra["mcp-session-id"] = session
            await post("notifications/initialized", None, extra)
            tools: list[dict[str, Any]] = []
            params: dict[str, Any] = {}
            while True:
                _, page = await post("tools/list", params, extra)
                tools += [t for t in page.get("tools", []) if isinstance(t, dict)]
                if (cursor := _pages(page)) is None:
                    break
                params = {"cursor": cursor}
            if session:
                with contextlib.suppress(httpx.HTTPError):
                    await client.delete(url, headers={**base, **extra})
            return Listing(tools, _server_name(initialized))
        except httpx.HTTPError as exc:
            raise UpstreamError(f"the upstream at {url} could not be listed: {exc}") from None


def _store(config: ProxyConfig, transport: str) -> Store:
    """The store the page describes: the one the proxy would run on (never opened here)."""
    if config.store is not None:
        return from_url(config.store)
    if transport == "stdio":  # the default on stdio: a SQLite file in the state directory
        return SQLiteStore(str(default_store_path("idemtools-proxy")))
    return from_url("memory://")


async def describe_proxy(
    config: ProxyConfig, tools: Sequence[Mapping[str, Any]], *, server: str, transport: str
) -> ServerDoc:
    """The page's model: each upstream tool with the policy the config gives it."""
    engine = Engine(_store(config, transport), registry=Registry(), default_policy=config.default)
    try:
        rows = []
        for tool in sorted(tools, key=lambda t: str(t.get("name"))):
            name = tool.get("name")
            if not isinstance(name, str):
                continue
            rule = config.rule_for(name)
            origin = "server default" if rule is None else f'proxy config [tools."{rule.pattern}"]'
            schema = tool.get("inputSchema")
            rows.append(
                (
                    name,
                    config.policy_for(name),
                    origin,
                    schema if isinstance(schema, dict) else None,
                )
            )
        return document(
            server=server,
            source=None,
            adapter=f"idemtools proxy ({transport})",
            engine=engine,
            store=engine.store,
            tools=rows,
        )
    finally:
        await engine.aclose()
