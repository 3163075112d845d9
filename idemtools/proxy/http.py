"""The Streamable HTTP relay: `--upstream URL --listen HOST:PORT`.

Every request whose `Host` and `Origin` the proxy accepts (`guard`) is forwarded to the
upstream's origin at the same path and query, its body inflated (`encoding`), headers passed
through (hop-by-hop ones, `Host`, `X-Forwarded-Host`/`Forwarded`, `Content-Encoding` aside;
`Accept-Encoding: identity`, so that answers arrive as the proxy reads them), on that caller's
request only: the proxy keeps no cookies. A body it cannot read is answered, never relayed.
Responses come back with their status, headers and body — JSON, or an SSE stream relayed
event by event. Both protocol eras: 2025-11-25 (`initialize`, `Mcp-Session-Id`, GET streams,
DELETE) and 2026-07-28 (stateless, `server/discover`). As on stdio, the `initialize` and
`server/discover` results gain `capabilities.tools.idempotency`, and a keyed `tools/call` is
decided by the engine; its upstream call keeps the client's id (each POST has its own answer
stream, so ids cannot collide) and headers. Events the upstream sends before the answer
(progress, logging, sampling requests) reach the client as SSE; a replay or refusal is JSON.

Faults: an upstream that cannot be reached never saw the call (answered, not recorded); one that
breaks the connection after the call was sent, answers 5xx without a JSON-RPC answer, or is
silent past `max_runtime` leaves the outcome unknown: recorded as `idempotency_outcome_unknown`.
A 4xx without a JSON-RPC answer (401, 403, a lost session's 404) ran nothing: it is relayed as it
came, not recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.cookiejar
import inspect
import itertools
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..engine import Engine
from ..errors import NOT_PROCESSED, RefusedError, UnauthorizedError
from ..policy import Registry
from ..stores import from_url
from . import jsonread, jsonwrite
from .auth import JwtVerifier, caller_refusal, http_context
from .batch import Kind, cancel_target, invalid, kind, needs_split
from .config import ProxyConfig
from .confirm import CredentialConfirmer, confirming
from .encoding import Corrupt, TooLarge, Unsupported, inflate
from .faults import UpstreamLost, unavailable_error
from .guard import HostGuard, loopback_guard
from .ingress import Refused, admit
from .keyed import KeyedCalls, ToolCatalog, Upstream, advertise, is_keyed, response
from .scope import scope_name

__all__ = ["HttpProxy", "http_server", "serve_http"]

log = logging.getLogger("idemtools.proxy")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_HOP = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "accept-encoding",
        "proxy-connection",
        # The body relayed is always the inflated one (see `encoding`).
        "content-encoding",
        # A Host the proxy did not validate, claimed by the caller.
        "forwarded",
        "x-forwarded-host",
    }
)
_ADVERTISED = frozenset({"initialize", "server/discover"})
MAX_BODY = 64 << 20
_CATALOGS = 1024  # callers whose tool list is kept at once


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """The proxy keeps no cookies: an upstream's `Set-Cookie` for one caller must never be
    sent on another caller's request (each request carries its caller's own `Cookie`)."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


def _loads(data: bytes) -> Any:
    try:
        return jsonread.loads(data)
    except ValueError:
        return None


def _events(buffer: bytearray) -> list[bytes]:
    """Complete SSE events (without their blank-line terminator) taken from `buffer`."""
    out: list[bytes] = []
    while True:
        data = bytes(buffer).replace(b"\r\n", b"\n")
        end = data.find(b"\n\n")
        if end < 0:
            if len(data) != len(buffer):
                buffer[:] = data
            return out
        out.append(data[:end])
        buffer[:] = data[end + 2 :]


def _event_data(event: bytes) -> bytes | None:
    lines = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def _sse(message: Any) -> bytes:
    return b"event: message\ndata: " + jsonwrite.dumps(message) + b"\n\n"


class _Refused(Exception):
    """The upstream answered HTTP without a JSON-RPC answer and ran nothing (4xx)."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        super().__init__(status)
        self.status, self.headers, self.body = status, headers, body


def _response_headers(
    response: httpx.Response, drop: frozenset[str] = frozenset()
) -> list[tuple[bytes, bytes]]:
    return [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in response.headers.multi_items()
        if name.lower() not in _HOP and name.lower() not in drop
    ]


class _CallUpstream:
    """`Upstream` for one keyed HTTP request: the client's headers, the client's id, and a
    queue for the events the upstream sends before its answer."""

    def __init__(
        self,
        proxy: HttpProxy,
        url: str,
        headers: list[tuple[str, str]],
        rid: Any,
        events: asyncio.Queue[bytes] | None = None,
    ):
        self.proxy = proxy
        self.url = url
        self.headers = headers
        self.rid = rid
        self.events: asyncio.Queue[bytes] = asyncio.Queue() if events is None else events
        self.refused: _Refused | None = None
        self.caller = _caller(headers)

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        own = method != "tools/call"  # the catalog's tools/list: an id of the proxy's own
        rid = f"idemtools-proxy:{next(self.proxy.ids)}" if own else self.rid
        body = jsonwrite.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            return await asyncio.wait_for(self._exchange(body, rid, relay=not own), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer within {timeout} s") from None

    async def _exchange(self, body: bytes, rid: Any, *, relay: bool) -> dict[str, Any]:
        client = self.proxy.client
        request = client.build_request("POST", self.url, headers=self.headers, content=body)
        try:
            response = await client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise UpstreamLost(f"cannot connect to the upstream ({exc})", sent=False) from None
        except httpx.HTTPError as exc:
            raise UpstreamLost(f"the upstream connection failed ({type(exc).__name__})") from None
        try:
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                buffer = bytearray()
                async for chunk in response.aiter_bytes():
                    buffer += chunk
                    for event in _events(buffer):
                        data = _event_data(event)
                        message = _loads(data) if data else None
                        if _answers(message, rid):
                            assert isinstance(message, dict)
                            return message
                        if relay:
                            await self.events.put(event + b"\n\n")
                raise UpstreamLost("the upstream's event stream ended without an answer")
            data = await response.aread()
            message = _loads(data) if data else None
            if _answers(message, rid):
                assert isinstance(message, dict)
                return message
            if 400 <= response.status_code < 500:
                raise _Refused(response.status_code, _response_headers(response), data)
            raise UpstreamLost(
                f"the upstream answered HTTP {response.status_code} without an answer"
            )
        except httpx.HTTPError as exc:
            raise UpstreamLost(f"the upstream connection broke ({type(exc).__name__})") from None
        finally:
            await response.aclose()


def _caller(headers: list[tuple[str, str]]) -> str:
    """Whose credentials a request carries (a digest: never stored or logged in clear)."""
    parts = [
        "\n".join(value for name, value in headers if name.lower() == wanted)
        for wanted in ("authorization", "cookie", "mcp-session-id")
    ]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


class _CatalogPerCaller(ToolCatalog):
    """One tool catalog per caller's credentials: the `tools/list` read on a caller's request
    is made with that caller's headers (an upstream may list other tools to other callers), so
    it decides "unknown tool" for that caller only. Bounded: the least recently used go."""

    def __init__(self) -> None:
        super().__init__()
        self._by_caller: OrderedDict[str, ToolCatalog] = OrderedDict()

    def changed(self) -> None:
        self._by_caller.clear()

    async def unknown(self, name: str, upstream: Upstream, meta: Any) -> bool:
        caller = str(getattr(upstream, "caller", ""))
        catalog = self._by_caller.get(caller)
        if catalog is None:
            catalog = self._by_caller[caller] = ToolCatalog()
            while len(self._by_caller) > _CATALOGS:
                self._by_caller.popitem(last=False)
        self._by_caller.move_to_end(caller)
        return await catalog.unknown(name, upstream, meta)


def _flight(headers: list[tuple[str, str]], rid: Any) -> tuple[str, str, str]:
    """Who sent request `rid`: ids are only unique per session (and caller)."""
    lowered = {name.lower(): value for name, value in headers}
    session = lowered.get("mcp-session-id", "")
    return session, lowered.get("authorization", ""), json.dumps(rid)


def _answers(message: Any, rid: Any) -> bool:
    return (
        isinstance(message, dict)
        and "method" not in message
        and message.get("id") == rid
        and type(message.get("id")) is type(rid)
    )


class HttpProxy:
    """The ASGI application: relay everything, decide keyed calls."""

    def __init__(
        self,
        upstream: str,
        config: ProxyConfig,
        verifier: JwtVerifier | None = None,
        confirm_ttl: float | None = None,
        guard: HostGuard | None = None,
    ) -> None:
        parts = urlsplit(upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--upstream must be an http(s) URL, got {upstream!r}")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.guard = guard if guard is not None else loopback_guard()
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=10.0),
            cookies=http.cookiejar.CookieJar(policy=_NoCookies()),
            # Bodies as the upstream sends them, never compressed on the way back: the answers
            # the proxy reads or patches are relayed with the upstream's own headers.
            headers={"accept-encoding": "identity"},
        )
        self.rules = config
        """The configuration as written: its `authorize` rules gate every call of a tool."""
        if confirm_ttl is not None:  # --confirm-credential: token-hash replays ask upstream
            config = confirming(config, CredentialConfirmer(upstream, self.client, confirm_ttl))
        self.config = config
        self.verifier = verifier
        self.store = from_url(config.store or "memory://")
        self.engine = Engine(self.store, registry=Registry(), default_policy=config.default)
        self.catalog = _CatalogPerCaller()
        self.keyed = KeyedCalls(self.engine, config, self.catalog)
        self.ids = itertools.count(1)
        self.in_flight: dict[tuple[str, str, str], int] = {}
        """(session, credential, id) of keyed calls being answered: their cancellations stop
        here."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                # In-flight keyed calls are recorded first (leases renewed), as in the library.
                await self.engine.aclose(self.config.shutdown_grace)
                await self.client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = origin = encoding = None
        for name, value in scope["headers"]:
            lowered = name.lower()
            if lowered == b"host":
                host = value.decode("latin-1")
            elif lowered == b"origin":
                origin = value.decode("latin-1")
            elif lowered == b"content-encoding":
                coding = value.decode("latin-1")
                encoding = coding if encoding is None else f"{encoding},{coding}"
        refused = self.guard.refusal(host, origin)
        if refused is not None:  # DNS rebinding: nothing reaches the upstream
            log.warning("request refused: %s", refused)
            await _refuse(send, 403, -32000, refused, "invalid_host_or_origin")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > MAX_BODY:
                await _refuse(send, 413, -32600, "request body too large", "body_too_large")
                return
            if not message.get("more_body"):
                break
        if encoding is not None and body:
            try:
                body = bytearray(inflate(bytes(body), encoding, MAX_BODY))
            except Unsupported as exc:
                await _refuse(send, 415, -32600, str(exc), "unsupported_content_encoding")
                return
            except TooLarge:
                await _refuse(send, 413, -32600, "request body too large", "body_too_large")
                return
            except Corrupt as exc:
                await _refuse(send, 400, -32700, f"Parse error: {exc}", "parse_error")
                return
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.origin + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        if query and "?" not in url:
            url += "?" + query
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in scope["headers"]
            if name.decode("latin-1").lower() not in _HOP
        ]
        message_in = None
        if scope["method"] != "POST" and body:
            # Streamable HTTP's GET and DELETE carry none; a lenient upstream might read one.
            await _refuse(send, 400, -32600, "this request carries no body", "unexpected_body")
            return
        if scope["method"] == "POST":
            message_in = admit(bytes(body))
            if isinstance(message_in, Refused):  # what it cannot parse or check: never relayed
                await _whole(send, 400, b"application/json", jsonwrite.dumps(message_in.response))
                return
        if await self._forbidden(message_in, headers, send):
            return
        if isinstance(message_in, dict) and is_keyed(message_in):
            flight = _flight(headers, message_in.get("id"))
            self.in_flight[flight] = self.in_flight.get(flight, 0) + 1
            try:
                await self._keyed(message_in, url, headers, send)
            finally:
                self.in_flight[flight] -= 1
                if not self.in_flight[flight]:
                    del self.in_flight[flight]
            return
        if (
            isinstance(message_in, list)
            and message_in
            and needs_split(message_in, lambda target: _flight(headers, target) in self.in_flight)
        ):
            await self._batch(message_in, url, headers, send)
            return
        if isinstance(message_in, dict) and message_in.get("method") == "notifications/cancelled":
            params = message_in.get("params")
            target = params.get("requestId") if isinstance(params, dict) else None
            if _flight(headers, target) in self.in_flight:
                # A keyed call in flight is not cancelled upstream: it finishes and is recorded.
                await _plain(send, 202, b"")
                return
        patch = None
        if isinstance(message_in, dict) and message_in.get("method") in _ADVERTISED:
            patch = message_in.get("id")
        await self._relay(scope["method"], url, headers, bytes(body), receive, send, patch)

    async def _forbidden(self, message: Any, headers: list[tuple[str, str]], send: Send) -> bool:
        """Refuse (and answer) an unkeyed `tools/call` its tool's `authorize` rule refuses:
        the rules cover every call of the tool, not only the keyed ones (which the engine
        checks itself). In a batch one refused entry refuses the whole batch."""
        entries = message if isinstance(message, list) else [message]
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("method") != "tools/call":
                continue
            if is_keyed(entry):
                continue
            params = entry.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if not isinstance(name, str):
                continue
            rule = self.rules.policy_for(name).authorize
            if rule is None:
                continue
            lowered = {key.lower(): value for key, value in headers}
            arguments = params.get("arguments") if isinstance(params, dict) else None
            context = await http_context(lowered, self.verifier, name, arguments)
            verdict: Any = rule(context)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is True or verdict is None:
                continue
            log.info("tools/call refused by the authorize rule of %s", name)
            outcome = self.engine.refusal(UnauthorizedError("unauthorized"))
            error = dict(outcome.error or {})
            error["data"] = {"type": UnauthorizedError.type, NOT_PROCESSED: True}
            rid = entry.get("id") if message is entry else None
            reply = {"jsonrpc": "2.0", "id": rid, "error": error}
            await _whole(
                send, 200 if message is entry else 403, b"application/json", jsonwrite.dumps(reply)
            )
            return True
        return False

    async def _relay(
        self,
        method: str,
        url: str,
        headers: list[tuple[str, str]],
        body: bytes,
        receive: Receive,
        send: Send,
        patch: Any,
    ) -> None:
        request = self.client.build_request(method, url, headers=headers, content=body)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await _plain(send, 502, f"idemtools proxy: upstream unreachable ({exc})".encode())
            return
        try:
            kind = response.headers.get("content-type", "")
            if patch is not None and kind.startswith("application/json"):
                data = await response.aread()
                message = _loads(data)
                if isinstance(message, dict) and _answers(message, patch) and advertise(message):
                    data = jsonwrite.dumps(message)
                out = _response_headers(response)
                out.append((b"content-length", str(len(data)).encode()))
                await send(
                    {"type": "http.response.start", "status": response.status_code, "headers": out}
                )
                await send({"type": "http.response.body", "body": data})
                return
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status_code,
                    "headers": _response_headers(response),
                }
            )
            stream = self._stream(
                response, patch if kind.startswith("text/event-stream") else None, send
            )
            await _until_disconnect(stream, receive)
        except httpx.HTTPError as exc:
            log.warning("upstream stream broke: %s", type(exc).__name__)
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    async def _stream(self, response: httpx.Response, patch: Any, send: Send) -> None:
        if patch is None:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        else:  # an SSE answer to initialize / server/discover: patch that one event
            buffer = bytearray()
            async for chunk in response.aiter_raw():
                buffer += chunk
                for event in _events(buffer):
                    data = _event_data(event)
                    message = _loads(data) if data else None
                    if (
                        isinstance(message, dict)
                        and _answers(message, patch)
                        and advertise(message)
                    ):
                        rest = [
                            line for line in event.split(b"\n") if not line.startswith(b"data:")
                        ]
                        event = b"\n".join([*rest, b"data: " + jsonwrite.dumps(message)])
                    await send(
                        {"type": "http.response.body", "body": event + b"\n\n", "more_body": True}
                    )
            if buffer:
                await send({"type": "http.response.body", "body": bytes(buffer), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _keyed(
        self, message: dict[str, Any], url: str, headers: list[tuple[str, str]], send: Send
    ) -> None:
        lowered = {name.lower(): value for name, value in headers}
        params = message["params"]
        context = await http_context(
            lowered, self.verifier, params.get("name"), params.get("arguments")
        )
        early = self._caller_refused(message, context)
        if early is not None:
            await _whole(send, 200, b"application/json", jsonwrite.dumps(early))
            return
        upstream = _CallUpstream(self, url, headers, message["id"])
        # The answer is decided apart from this request: a client that goes away does not
        # stop the execution, which finishes and is recorded (the retry gets the replay).
        task = asyncio.ensure_future(self._answer(message, context, upstream))
        first = asyncio.ensure_future(upstream.events.get())
        await asyncio.wait({task, first}, return_when=asyncio.FIRST_COMPLETED)
        if not first.done():
            first.cancel()
            reply = task.result()
            refused = upstream.refused
            if refused is not None:
                await send(
                    {
                        "type": "http.response.start",
                        "status": refused.status,
                        "headers": refused.headers,
                    }
                )
                await send({"type": "http.response.body", "body": refused.body})
                return
            data = jsonwrite.dumps(reply)
            await _whole(send, 200, b"application/json", data)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        with contextlib.suppress(OSError, RuntimeError):
            await send({"type": "http.response.body", "body": first.result(), "more_body": True})
            while True:
                nxt = asyncio.ensure_future(upstream.events.get())
                await asyncio.wait({task, nxt}, return_when=asyncio.FIRST_COMPLETED)
                if nxt.done():
                    await send(
                        {"type": "http.response.body", "body": nxt.result(), "more_body": True}
                    )
                    continue
                nxt.cancel()
                while not upstream.events.empty():
                    event = upstream.events.get_nowait()
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                await send({"type": "http.response.body", "body": _sse(task.result())})
                return

    async def _batch(
        self, entries: list[Any], url: str, headers: list[tuple[str, str]], send: Send
    ) -> None:
        """A batch holding a keyed call (see `batch`): keyed entries through the engine, every
        other entry POSTed upstream on its own (the client's id and headers), and one answer:
        a JSON array of every response in the batch's order, or, when the upstream sent
        events (progress, sampling requests) first, an SSE stream of them ending in that array.
        """
        events: asyncio.Queue[bytes] = asyncio.Queue()
        slots: list[asyncio.Future[Any]] = []  # each: (response, the HTTP refusal if any)
        others: list[asyncio.Future[Any]] = []  # forwarded notifications
        loop = asyncio.get_running_loop()
        for entry in entries:
            what = kind(entry)
            if what is Kind.KEYED:
                slots.append(asyncio.ensure_future(self._batch_keyed(entry, url, headers, events)))
            elif what is Kind.REQUEST:
                upstream = _CallUpstream(self, url, headers, entry["id"], events)
                slots.append(asyncio.ensure_future(_forward(upstream, entry)))
            elif what is Kind.INVALID:
                done: asyncio.Future[Any] = loop.create_future()
                done.set_result((invalid(entry), None))
                slots.append(done)
            else:
                target = cancel_target(entry)
                if target is not None and _flight(headers, target) in self.in_flight:
                    continue  # as on its own: the keyed execution goes on and is recorded
                others.append(asyncio.ensure_future(self._notify(url, headers, entry)))
        everything = {*slots, *others}
        first = asyncio.ensure_future(events.get())
        while not first.done() and not all(job.done() for job in everything):
            await asyncio.wait({*everything, first}, return_when=asyncio.FIRST_COMPLETED)
        if not first.done():
            first.cancel()
            answers = [job.result() for job in slots]
            refusals = [refused for _, refused in answers]
            if refusals and all(r is not None for r in refusals):  # nothing reached a tool
                refused = refusals[0]
                await send(
                    {
                        "type": "http.response.start",
                        "status": refused.status,
                        "headers": refused.headers,
                    }
                )
                await send({"type": "http.response.body", "body": refused.body})
                return
            if not slots:  # only notifications: no response, as JSON-RPC says
                await _plain(send, 202, b"")
                return
            data = jsonwrite.dumps([reply for reply, _ in answers])
            await _whole(send, 200, b"application/json", data)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        with contextlib.suppress(OSError, RuntimeError):
            await send({"type": "http.response.body", "body": first.result(), "more_body": True})
            while True:
                nxt = asyncio.ensure_future(events.get())
                await asyncio.wait({*everything, nxt}, return_when=asyncio.FIRST_COMPLETED)
                if nxt.done():
                    await send(
                        {"type": "http.response.body", "body": nxt.result(), "more_body": True}
                    )
                    continue
                if not all(job.done() for job in everything):
                    nxt.cancel()
                    continue
                nxt.cancel()
                while not events.empty():
                    event = events.get_nowait()
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                array = [job.result()[0] for job in slots]
                await send({"type": "http.response.body", "body": _sse(array)})
                return

    async def _batch_keyed(
        self,
        entry: dict[str, Any],
        url: str,
        headers: list[tuple[str, str]],
        events: asyncio.Queue[bytes],
    ) -> tuple[dict[str, Any], _Refused | None]:
        flight = _flight(headers, entry.get("id"))
        self.in_flight[flight] = self.in_flight.get(flight, 0) + 1
        try:
            lowered = {name.lower(): value for name, value in headers}
            params = entry["params"]
            context = await http_context(
                lowered, self.verifier, params.get("name"), params.get("arguments")
            )
            refused = self._caller_refused(entry, context)
            if refused is not None:
                return refused, None
            upstream = _CallUpstream(self, url, headers, entry["id"], events)
            reply = await self._answer(entry, context, upstream)
            return reply, upstream.refused
        finally:
            self.in_flight[flight] -= 1
            if not self.in_flight[flight]:
                del self.in_flight[flight]

    async def _notify(self, url: str, headers: list[tuple[str, str]], entry: Any) -> None:
        """Forward a notification (or a response to a server request) from a split batch."""
        try:
            response = await self.client.post(url, headers=headers, content=jsonwrite.dumps(entry))
            await response.aclose()
        except httpx.HTTPError as exc:
            log.warning("a notification of a batch was not delivered: %s", type(exc).__name__)

    def _caller_refused(self, message: dict[str, Any], context: Any) -> dict[str, Any] | None:
        """The answer to a keyed call refused for its caller before any record is read."""
        name = message["params"].get("name")
        policy = self.config.policy_for(name) if isinstance(name, str) else self.config.default
        key = message["params"].get("idempotencyKey")
        error: RefusedError | None = caller_refusal(
            self.verifier, context, scope_name(policy.scope), key
        )
        if error is None:
            return None
        return response(message.get("id"), self.engine.refusal(error))

    async def _answer(
        self, message: dict[str, Any], context: Any, upstream: _CallUpstream
    ) -> dict[str, Any]:
        keyed = self.keyed

        class Refusing:
            caller = upstream.caller

            async def request(
                self, method: str, params: dict[str, Any], *, timeout: float | None
            ) -> dict[str, Any]:
                try:
                    return await upstream.request(method, params, timeout=timeout)
                except _Refused as exc:
                    if method == "tools/call":
                        upstream.refused = exc
                    raise UpstreamLost(f"HTTP {exc.status}", sent=False) from None

        try:
            return await keyed.answer(message, context, Refusing())
        except Exception:
            log.exception("keyed call failed inside the proxy")
            return {
                "jsonrpc": "2.0",
                "id": message.get("id"),
                "error": {"code": -32603, "message": "idemtools proxy internal error"},
            }


async def _forward(
    upstream: _CallUpstream, entry: dict[str, Any]
) -> tuple[dict[str, Any], _Refused | None]:
    """An unkeyed request of a split batch, POSTed on its own; its response (never raises)."""
    rid = entry["id"]
    try:
        reply = await upstream._exchange(jsonwrite.dumps(entry), rid, relay=True)
    except _Refused as exc:  # HTTP 4xx without JSON-RPC: nothing ran
        error = {
            "code": -32603,
            "message": f"the upstream refused this request: HTTP {exc.status}",
            "data": {"type": "upstream_refused", "status": exc.status},
        }
        return {"jsonrpc": "2.0", "id": rid, "error": error}, exc
    except UpstreamLost as exc:
        return {
            "jsonrpc": "2.0",
            "id": rid,
            "error": unavailable_error(exc.reason, sent=exc.sent),
        }, None
    if entry.get("method") in _ADVERTISED:
        advertise(reply)
    return reply, None


async def _until_disconnect(stream: Awaitable[None], receive: Receive) -> None:
    """Relay `stream` until it ends or the client goes away (then stop reading upstream)."""
    relay = asyncio.ensure_future(stream)

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({relay, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay  # re-raises what broke the relay (an upstream error)


async def _refuse(send: Send, status: int, code: int, message: str, kind: str) -> None:
    """An HTTP refusal by the proxy itself: a JSON-RPC error (id null) with `data.type`."""
    error = {"code": code, "message": message, "data": {"type": kind}}
    body = jsonwrite.dumps({"jsonrpc": "2.0", "id": None, "error": error})
    await _whole(send, status, b"application/json", body)


async def _plain(send: Send, status: int, body: bytes) -> None:
    await _whole(send, status, b"text/plain", body)


async def _whole(send: Send, status: int, content_type: bytes, body: bytes) -> None:
    """One response sent whole (not a stream), with its length."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_server(app: HttpProxy, listen: str) -> Any:
    """The uvicorn server of `app` on `listen` (HOST:PORT). It adds no `date` or `server`
    header of its own: relayed answers carry the upstream's, and only those."""
    import uvicorn  # the `proxy` extra (mcp brings it too)

    host, _, port = listen.rpartition(":")
    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=host.strip("[]") or "127.0.0.1",
            port=int(port),
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=int(app.config.shutdown_grace),
            server_header=False,
            date_header=False,
        )
    )


async def serve_http(
    upstream: str,
    listen: str,
    config: ProxyConfig,
    verifier: JwtVerifier | None = None,
    confirm_ttl: float | None = None,
    guard: HostGuard | None = None,
) -> int:
    """Serve the relay on `listen` (HOST:PORT) until SIGTERM/SIGINT; returns the exit code."""
    app = HttpProxy(upstream, config, verifier, confirm_ttl, guard)
    await http_server(app, listen).serve()
    return 0
