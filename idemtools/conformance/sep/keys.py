"""The key as written: an opaque string, matched exactly.

Keys that differ in case, by whitespace or in Unicode normalization form are other keys, other
operations. A server may refuse a key it will not store (the SEP fixes no key format).
"""

from __future__ import annotations

import json
import unicodedata

from ..contract import RECORD
from ..scenario import Context, Outcomes, Reply, _first, _verdict

__all__ = ["key_case", "key_unicode", "key_whitespace"]


async def _distinct_keys(ctx: Context, check: str, what: str, one: str, two: str) -> Outcomes:
    """Two keys that differ only as `what`: two operations, each replaying its own result."""
    label = ctx.fresh("key")
    first = await ctx.call(RECORD, {"label": label}, one)
    if (restricted := await _restricts(ctx, check, label, one, first, 0)) is not None:
        return restricted
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    second = await ctx.call(RECORD, {"label": label}, two)
    if (restricted := await _restricts(ctx, check, label, two, second, 1)) is not None:
        return restricted
    if second.executions != 2:
        sent = f"key {json.dumps(one)}, then key {json.dumps(two)} ({what}), same arguments"
        if second.same_result(first):
            seen = f"the second got the first key's result replayed: {second.show()}"
        elif second.rejected:
            seen = f"the second was refused, as if it were the first key: {second.show()}"
        else:
            seen = f"the second did not run as a call of its own: {second.show()}"
        return {check: ("fail", f"sent {sent}; {seen}")}
    again_one = await ctx.call(RECORD, {"label": label}, one)
    again_two = await ctx.call(RECORD, {"label": label}, two)
    ok = again_one.same_result(first) and again_two.same_result(second)
    return {
        check: _verdict(
            ok and await ctx.count(label) == 2,
            f"keys differing only by {what} are two operations, each replaying its own",
            f"after two keys differing by {what}, retries got {again_one.show()} and "
            f"{again_two.show()}",
        )
    }


async def _restricts(
    ctx: Context, check: str, label: str, key: str, reply: Reply, ran_before: int
) -> Outcomes | None:
    """The SEP fixes no key format: a server may refuse a key it will not store (spaces,
    non-ASCII) with `idempotency_key_invalid`, running nothing. Then there is nothing to
    compare: a skip, never a failure. Refused but run, it is no refusal: the check goes on."""
    if reply.error_type() != "idempotency_key_invalid":
        return None
    if await ctx.count(label) != ran_before:
        return None
    return {
        check: (
            "skip",
            f"the server restricts keys: it refused key {json.dumps(key)} with "
            "idempotency_key_invalid and ran nothing (the SEP fixes no key format)",
        )
    }


async def key_case(ctx: Context) -> Outcomes:
    base = ctx.fresh("KeyCase")
    return await _distinct_keys(ctx, "sep-3182-key-case-sensitive", "case", base, base.swapcase())


async def key_whitespace(ctx: Context) -> Outcomes:
    base = ctx.fresh("k")
    return await _distinct_keys(
        ctx, "sep-3182-key-whitespace-significant", "trailing whitespace", base, base + " "
    )


async def key_unicode(ctx: Context) -> Outcomes:
    base = ctx.fresh("k")
    nfc = base + unicodedata.normalize("NFC", "-caf\u00e9")
    nfd = base + unicodedata.normalize("NFD", "-caf\u00e9")
    return await _distinct_keys(
        ctx, "sep-3182-key-unicode-exact", "NFC vs NFD of the same text", nfc, nfd
    )
