"""The keyed-call path: a `tools/call` with an `idempotencyKey`, decided by the engine.

"Run" is forwarding the call upstream — without the key unless `--forward-key`, so an upstream
that validates its params strictly is not confused. What comes back is the outcome, recorded
and replayed as the library records a handler's: a result (`isError` too), a JSON-RPC error,
or, when the answer is lost for good, `idempotency_outcome_unknown` (see `faults`). Two answers
are not recorded, because nothing ran: a call that never left the proxy, and an "unknown tool"
refusal (told by the upstream's answer, see `unknown`), so a rolling deploy that adds the tool
does not replay the refusal for a retention window.

A replay in the protocol era its record was made in is the recorded answer, equal as a JSON
value apart from the id; only a replay into the other era is re-enveloped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

from ..engine import Engine, ToolCall
from ..outcome import Outcome
from ..policy import Policy
from ..scopes import CallContext
from .config import ProxyConfig
from .faults import UpstreamLost, late_unknown, not_sent, outcome_unknown
from .ingress import refusal
from .unknown import Verdict, verdict

__all__ = ["KEY", "KeyedCalls", "ToolCatalog", "Upstream", "advertise", "is_keyed"]

log = logging.getLogger("idemtools.proxy")

KEY = "idempotencyKey"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
LEGACY = "2025-11-25"
ERA_MARK = "io.idemtools/recordedEra"
"""Kept in a record only when its era cannot be read from it (a 2026-07-28 answer without
`resultType`, a 2025-11-25 one with it); removed from every answer."""
_LIST_PAGE_CAP = 100
MISS_TTL = 30.0
"""Seconds a name the upstream's listing lacked is remembered as unlisted."""
MAX_MISSES = 1024
"""Names remembered as unlisted at most: a client can invent names."""
MIN_REFRESH = 1.0
"""A listing younger than this is not read again for a name it lacks."""


class Upstream(Protocol):
    """One way of sending a request to the upstream server and waiting for its answer."""

    async def request(
        self, method: str, params: dict[str, Any], *, timeout: float | None
    ) -> dict[str, Any]:
        """The upstream's response message (`result` or `error`); raises `UpstreamLost`
        when it cannot answer any more, and `TimeoutError` after `timeout` seconds."""
        ...


def is_keyed(message: Mapping[str, Any]) -> bool:
    """A request the engine decides: `tools/call` with a key, not an MRTR continuation.

    MRTR continuations (`requestState` / `inputResponses`, non-null) are outside SEP-3182
    (its Scope section) and pass through, touching no record, as in the library.
    """
    if message.get("method") != "tools/call" or message.get("id") is None:
        return False
    params = message.get("params")
    return (
        isinstance(params, dict)
        and params.get(KEY) is not None
        and params.get("requestState") is None
        and params.get("inputResponses") is None
    )


def advertise(message: dict[str, Any]) -> bool:
    """Add `capabilities.tools.idempotency` to an `initialize` / `server/discover` result in
    place; True when it changed. Nothing else is touched: an upstream without a `tools`
    capability has no tools to deduplicate, and is left as it is."""
    result = message.get("result")
    caps = result.get("capabilities") if isinstance(result, dict) else None
    tools = caps.get("tools") if isinstance(caps, dict) else None
    if not isinstance(tools, dict) or "idempotency" in tools:
        return False
    assert isinstance(caps, dict)
    caps["tools"] = {**tools, "idempotency": {}}
    return True


class ToolCatalog:
    """The upstream's tool names, from its own `tools/list`: asked only when the upstream's
    answer is ambiguous (see `unknown`), to tell "unknown tool" from a tool's error.

    Read when first needed, kept until the upstream sends `notifications/tools/list_changed`,
    and read again (at most once per MIN_REFRESH) for a name not in it (the tool may have
    been added since). A name it lacks is remembered for MISS_TTL seconds (at most MAX_MISSES
    names, the oldest forgotten first), so retries of an unlisted name do not read it again.
    Any doubt (the listing fails, is cut off) counts as known, so the answer is recorded: a
    second execution is worse than a refusal replayed.
    """

    def __init__(self) -> None:
        self._names: frozenset[str] | None = None
        self._read_at = 0.0
        self._misses: OrderedDict[str, float] = OrderedDict()
        self._lock = asyncio.Lock()

    def changed(self) -> None:
        self._names = None
        self._misses.clear()

    def lists(self, name: str) -> bool:
        """Whether the listing at hand (none read: no) has `name`; reads nothing."""
        return self._names is not None and name in self._names

    async def unknown(self, name: str, upstream: Upstream, meta: Any) -> bool:
        if self.lists(name):
            return False
        now = time.monotonic()
        expiry = self._misses.get(name)
        if expiry is not None and expiry > now:
            return True
        async with self._lock:  # callers at once share one reading
            fresh = self._names is not None and time.monotonic() - self._read_at < MIN_REFRESH
            if not fresh:
                names = await self._read(upstream, meta)
                if names is None:
                    return False
                self._names, self._read_at = names, time.monotonic()
        if self.lists(name):
            return False
        self._misses[name] = time.monotonic() + MISS_TTL
        self._misses.move_to_end(name)
        while len(self._misses) > MAX_MISSES:
            self._misses.popitem(last=False)
        return True

    async def _read(self, upstream: Upstream, meta: Any) -> frozenset[str] | None:
        names: set[str] = set()
        cursor: Any = None
        try:
            for _ in range(_LIST_PAGE_CAP):
                params: dict[str, Any] = {}
                if isinstance(meta, dict):  # the 2026-07-28 era: every request carries it
                    params["_meta"] = meta
                if cursor is not None:
                    params["cursor"] = cursor
                answer = await upstream.request("tools/list", params, timeout=10.0)
                result = answer.get("result")
                tools = result.get("tools") if isinstance(result, dict) else None
                if not isinstance(tools, list):
                    return None
                names.update(t["name"] for t in tools if isinstance(t, dict) and "name" in t)
                cursor = result.get("nextCursor") if isinstance(result, dict) else None
                if cursor is None:
                    return frozenset(names)
        except (UpstreamLost, TimeoutError, OSError):
            pass
        log.warning("upstream tools/list failed; an error answer is recorded as the outcome")
        return None


class KeyedCalls:
    """Decides keyed `tools/call` requests: the engine, with forwarding as "run"."""

    def __init__(self, engine: Engine, config: ProxyConfig, catalog: ToolCatalog) -> None:
        self.engine = engine
        self.config = config
        self.catalog = catalog
        self._policies: dict[str, Policy] = {}
        """Each tool's policy, once looked up (the config is frozen)."""
        self.server_info: Any = None
        """The upstream's 2026-07-28 `serverInfo` stamp, from its last answer that had one."""

    async def answer(
        self, message: Mapping[str, Any], context: CallContext, upstream: Upstream
    ) -> dict[str, Any]:
        """The response message for the client (its own `id`), for a message `is_keyed`."""
        refused = refusal(message)
        if refused is not None:  # the transports refuse these first: never forwarded
            return refused
        params: dict[str, Any] = message["params"]
        name: str = params["name"]
        arguments = params.get("arguments")
        rid = message["id"]
        modern = _modern(params)
        first: list[dict[str, Any]] = []  # the upstream's answer, as the client gets it
        policy = self._policies.get(name)
        if policy is None:
            policy = self._policies[name] = self.config.policy_for(name)
        key = params[KEY]

        async def run() -> Outcome:
            forwarded = (
                params if self.config.forward_key else {k: v for k, v in params.items() if k != KEY}
            )
            # The request goes on past max_runtime: a late answer replaces the unknown record.
            request = asyncio.ensure_future(upstream.request("tools/call", forwarded, timeout=None))
            try:
                done, _ = await asyncio.wait({request}, timeout=policy.max_runtime)
            except BaseException:
                request.cancel()
                raise
            if not done:
                log.error(
                    "keyed call still unanswered after max_runtime %.0f s (tool=%s); recorded "
                    "as outcome unknown until its answer comes",
                    policy.max_runtime or 0,
                    name,
                )
                return late_unknown(
                    str(key),
                    "no answer within the tool's max_runtime",
                    self._late(request, name, params, upstream),
                )
            try:
                reply = request.result()
            except UpstreamLost as exc:
                if not exc.sent:
                    return not_sent(exc.reason)
                log.error("keyed call lost: %s (tool=%s); recorded as outcome unknown", exc, name)
                return outcome_unknown(str(key), exc.reason)
            outcome = await self._outcome(reply, name, params, upstream)
            result = outcome.result
            if result is not None:
                first.append(result)
                if modern != ("resultType" in result):  # the era cannot be read from it
                    era = _era(params)
                    return Outcome(result={**result, ERA_MARK: era}, final=outcome.final)
            return outcome

        call = ToolCall(name=name, arguments=arguments, key=key, context=context, policy=policy)
        outcome = await self.engine.handle(call, run)
        result = outcome.result
        if result is None:
            return response(rid, outcome)
        if not outcome.replayed and first:
            self._learn_stamp(first[0], modern)
            return {"jsonrpc": "2.0", "id": rid, "result": first[0]}
        if not outcome.replayed:  # another call's execution, shared: not ours to change
            result = dict(result)
        mark = result.pop(ERA_MARK, None)  # a replay was decoded from the store: ours
        recorded_modern = ("resultType" in result) if mark is None else mark != LEGACY
        if recorded_modern != modern:
            result = self._envelope(result, modern)
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    async def _late(
        self,
        request: asyncio.Future[dict[str, Any]],
        name: str,
        params: Mapping[str, Any],
        upstream: Upstream,
    ) -> Outcome | None:
        """The outcome of an upstream answer that came after max_runtime; None when the
        upstream died first (the unknown record then stays)."""
        try:
            reply = await request
        except (UpstreamLost, TimeoutError, OSError) as exc:
            log.error("late keyed call lost: %s (tool=%s); outcome stays unknown", exc, name)
            return None
        outcome = await self._outcome(reply, name, params, upstream)
        result = outcome.result
        if result is not None and _modern(params) != ("resultType" in result):
            return Outcome(result={**result, ERA_MARK: _era(params)}, final=outcome.final)
        return outcome

    def _learn_stamp(self, result: Mapping[str, Any], modern: bool) -> None:
        meta = result.get("_meta")
        if modern and isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
            self.server_info = meta[SERVER_INFO_META_KEY]

    def _envelope(self, result: dict[str, Any], modern: bool) -> dict[str, Any]:
        """Fit a result recorded in the other era to the era of the request replaying it, as
        the library does: `resultType` and the `serverInfo` stamp exist only in 2026-07-28.
        `result` was just decoded from the store: ours."""
        meta = result.get("_meta")
        if modern:
            result.setdefault("resultType", "complete")
            has_stamp = isinstance(meta, dict) and SERVER_INFO_META_KEY in meta
            if not has_stamp and self.server_info is not None:
                base = meta if isinstance(meta, dict) else {}
                result["_meta"] = {**base, SERVER_INFO_META_KEY: self.server_info}
        else:
            result.pop("resultType", None)
            if isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
                rest = {k: v for k, v in meta.items() if k != SERVER_INFO_META_KEY}
                if rest:
                    result["_meta"] = rest
                else:
                    result.pop("_meta")
        return result

    async def _outcome(
        self, reply: Mapping[str, Any], name: str, params: Mapping[str, Any], upstream: Upstream
    ) -> Outcome:
        error = reply.get("error")
        result = reply.get("result")
        if not isinstance(error, dict):
            if not isinstance(result, dict):
                return outcome_unknown(str(params.get(KEY)), "the upstream's answer was malformed")
            if result.get("resultType", "complete") == "input_required":
                return Outcome(result=result, final=False)
        seen = verdict(name, reply)
        if seen is Verdict.UNKNOWN:
            # An SDK's own refusal: nothing ran. A listing at hand that has the name says
            # the tool's handler wrote it, so it is recorded.
            ran = self.catalog.lists(name)
        elif seen is Verdict.AMBIGUOUS:
            ran = not await self.catalog.unknown(name, upstream, params.get("_meta"))
        else:
            ran = True
        if isinstance(error, dict):
            return Outcome(error=error, final=ran)
        return Outcome(result=result, final=ran)


def _era(params: Mapping[str, Any]) -> str:
    """The request's protocol version: its `_meta` one (2026-07-28 on), else 2025-11-25."""
    if not _modern(params):
        return LEGACY
    version = params["_meta"][PROTOCOL_VERSION_META_KEY]
    return version if isinstance(version, str) and version != LEGACY else "2026-07-28"


def _modern(params: Mapping[str, Any]) -> bool:
    """A 2026-07-28 request: it carries its protocol version in `_meta` (2025-11-25 has a
    session, negotiated by `initialize`, and no such key)."""
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta


def response(rid: Any, outcome: Outcome) -> dict[str, Any]:
    """The JSON-RPC response carrying `outcome` for the request `rid`."""
    if outcome.error is not None:
        return {"jsonrpc": "2.0", "id": rid, "error": outcome.error}
    return {"jsonrpc": "2.0", "id": rid, "result": outcome.result}
