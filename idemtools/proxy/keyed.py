"""The keyed-call path: a `tools/call` with an `idempotencyKey`, decided by the engine.

"Run" is forwarding the call upstream — without the key unless `--forward-key`, so an upstream
that validates its params strictly is not confused. What comes back is the outcome, recorded
and replayed as the library records a handler's: a result (`isError` too), a JSON-RPC error,
or, when the answer is lost for good, `idempotency_outcome_unknown` (see `faults`). Two answers
are not recorded, because nothing ran: a call that never left the proxy, and a call to a tool
the upstream does not list ("unknown tool"), so a rolling deploy that adds the tool does not
replay the refusal for a retention window.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ..engine import Engine, ToolCall
from ..outcome import Outcome
from ..policy import Policy
from ..scopes import CallContext
from .config import ProxyConfig
from .faults import UpstreamLost, not_sent, outcome_unknown

__all__ = ["KEY", "KeyedCalls", "ToolCatalog", "Upstream", "advertise", "is_keyed"]

log = logging.getLogger("idemtools.proxy")

KEY = "idempotencyKey"
PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
SERVER_INFO_META_KEY = "io.modelcontextprotocol/serverInfo"
_LIST_PAGE_CAP = 100


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
    """The upstream's tool names, from its own `tools/list`, to tell "unknown tool" (nothing
    ran: answered, not recorded) from a tool's error (recorded).

    Read when first needed, kept until the upstream sends `notifications/tools/list_changed`,
    and read again when a name is not in it (the tool may have been added since). Any doubt
    (the listing fails, is cut off) counts as known, so the answer is recorded: a second
    execution is worse than a refusal replayed.
    """

    def __init__(self) -> None:
        self._names: frozenset[str] | None = None

    def changed(self) -> None:
        self._names = None

    async def unknown(self, name: str, upstream: Upstream, meta: Any) -> bool:
        if self._names is not None and name in self._names:
            return False
        names = await self._read(upstream, meta)
        if names is None:
            return False
        self._names = names
        return name not in names

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
        params: dict[str, Any] = message["params"]
        name = params.get("name")
        arguments = params.get("arguments")
        rid = message["id"]
        if not isinstance(name, str) or not (isinstance(arguments, dict) or arguments is None):
            # Malformed params: the upstream refuses them as it always does; nothing to record.
            return _with_id(await upstream.request("tools/call", params, timeout=None), rid)
        policy = self._policies.get(name)
        if policy is None:
            policy = self._policies[name] = self.config.policy_for(name)
        key = params[KEY]

        async def run() -> Outcome:
            forwarded = (
                params if self.config.forward_key else {k: v for k, v in params.items() if k != KEY}
            )
            try:
                reply = await upstream.request("tools/call", forwarded, timeout=policy.max_runtime)
            except UpstreamLost as exc:
                if not exc.sent:
                    return not_sent(exc.reason)
                log.error("keyed call lost: %s (tool=%s); recorded as outcome unknown", exc, name)
                return outcome_unknown(str(key), exc.reason)
            except TimeoutError:
                log.error(
                    "keyed call still unanswered after max_runtime %.0f s (tool=%s); recorded "
                    "as outcome unknown",
                    policy.max_runtime or 0,
                    name,
                )
                return outcome_unknown(str(key), "no answer within the tool's max_runtime")
            return await self._outcome(reply, name, params, upstream)

        call = ToolCall(name=name, arguments=arguments, key=key, context=context, policy=policy)
        outcome = await self.engine.handle(call, run)
        if outcome.result is not None:
            modern = _modern(params)
            if not outcome.replayed:
                self._learn_stamp(outcome.result, modern)
            else:
                return {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": self._envelope(outcome.result, modern),
                }
        return response(rid, outcome)

    def _learn_stamp(self, result: Mapping[str, Any], modern: bool) -> None:
        meta = result.get("_meta")
        if modern and isinstance(meta, dict) and SERVER_INFO_META_KEY in meta:
            self.server_info = meta[SERVER_INFO_META_KEY]

    def _envelope(self, result: dict[str, Any], modern: bool) -> dict[str, Any]:
        """Fit a replayed result to the era of the request replaying it, as the library does:
        `resultType` and the `serverInfo` stamp exist only in 2026-07-28. A replay in the era
        it was recorded in is unchanged. `result` was just decoded from the store: ours."""
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
        if isinstance(error, dict):
            unknown = await self.catalog.unknown(name, upstream, params.get("_meta"))
            return Outcome(error=error, final=not unknown)
        result = reply.get("result")
        if not isinstance(result, dict):
            return outcome_unknown(str(params.get(KEY)), "the upstream's answer was malformed")
        final = result.get("resultType", "complete") != "input_required"
        if final and result.get("isError") is True:
            final = not await self.catalog.unknown(name, upstream, params.get("_meta"))
        return Outcome(result=result, final=final)


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


def _with_id(reply: Mapping[str, Any], rid: Any) -> dict[str, Any]:
    return {**reply, "id": rid}
