"""The `tools.idempotency` capability, where each protocol era declares it.

In 2025-11-25 capabilities are in the initialize result; in 2026-07-28 in `server/discover`.
Neither check calls a tool.
"""

from __future__ import annotations

from ..scenario import Context, Outcomes, _cut_json
from ..wire import MODERN, encode

__all__ = ["capability_discover", "capability_initialize"]


def _capability(ctx: Context, check: str, where: str) -> Outcomes:
    method = "server/discover" if ctx.era == MODERN else "initialize"
    ctx.transcript.append({"request": method, "answer": _cut_json(ctx.wire.opened)})
    tools = (ctx.wire.opened.get("capabilities") or {}).get("tools")
    value = tools.get("idempotency") if isinstance(tools, dict) else None
    if isinstance(value, dict):
        return {check: ("pass", f"capabilities.tools.idempotency = {encode(value)} in {where}")}
    if value is None:
        return {check: ("fail", f"capabilities.tools.idempotency missing from {where}")}
    return {check: ("fail", f"capabilities.tools.idempotency is {encode(value)}, not an object")}


async def capability_initialize(ctx: Context) -> Outcomes:
    version = ctx.wire.opened.get("protocolVersion")
    where = "the initialize result" + (f" (protocolVersion {version})" if version else "")
    return _capability(ctx, "sep-3182-capability-initialize", where)


async def capability_discover(ctx: Context) -> Outcomes:
    return _capability(ctx, "sep-3182-capability-discover", "the server/discover result")
