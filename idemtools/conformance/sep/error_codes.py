"""The base specification's error codes, judged on every error answer an era's checks received.

Not the SEP's: the `mcp-base-*` checks. Their scenario runs last in each era, since it reads
the errors of every other one.
"""

from __future__ import annotations

import json

from ..scenario import Context, Outcomes, _cut, _cut_json, _verdict

__all__ = ["DEFINED_RESERVED", "base_error_codes"]


DEFINED_RESERVED = frozenset({-32020, -32021, -32022})  # 2026-07-28: HeaderMismatch, ...


def _codes(ctx: Context, low: int, high: int, allowed: frozenset[int]) -> list[str]:
    seen: dict[int, str] = {}
    for error, sent in ctx.errors:
        code = error.get("code")
        if type(code) is int and low <= code <= high and code not in allowed:
            data = error.get("data")
            kind = data.get("type") if isinstance(data, dict) else None
            try:
                name = json.loads(sent).get("name")
            except (ValueError, AttributeError):
                name = None
            seen.setdefault(
                code,
                f"{code} ({error.get('message')!r}"
                + (f", data.type {kind}" if kind else "")
                + (f", answering {name}" if name else "")
                + ")",
            )
    return [seen[c] for c in sorted(seen)]


async def base_error_codes(ctx: Context) -> Outcomes:
    """Every JSON-RPC error this era's checks received, against the base spec's ranges."""
    checks = ("mcp-base-error-codes-reserved", "mcp-base-error-codes-legacy")
    total = len(ctx.errors)
    for error, sent in ctx.errors:  # the evidence: every error answer and what it answered
        ctx.transcript.append({"request": _cut(sent), "answer": _cut_json({"error": error})})
    reserved = _codes(ctx, -32099, -32020, DEFINED_RESERVED)
    legacy = _codes(ctx, -32019, -32000, frozenset())
    return {
        checks[0]: _verdict(
            not reserved,
            f"no undefined code in -32020..-32099 among {total} error answers",
            "codes in -32020..-32099 that the specification does not define: "
            + "; ".join(reserved),
        ),
        checks[1]: _verdict(
            not legacy,
            f"no code in -32000..-32019 among {total} error answers",
            "codes in the legacy sub-range -32000..-32019: " + "; ".join(legacy),
        ),
    }
