"""Which calls a record answers: its caller's, on any connection, at any instance, in the window.

Each needs something a single connection does not give (a second caller's credentials, a new
connection, a second instance, the documented window) and is a skip, naming the option that
would run it, where the run lacks it.
"""

from __future__ import annotations

import asyncio

from ..contract import RECORD
from ..scenario import Context, Outcomes, _first, _verdict
from ..wire import LEGACY, HttpWire

__all__ = ["retention", "scope_across_connections", "scope_per_caller", "shared_store"]


async def scope_per_caller(ctx: Context) -> Outcomes:
    check = "sep-3182-scope-per-caller"
    if ctx.second_caller is None:
        if isinstance(ctx.wire, HttpWire):
            return {check: ("skip", ctx.second_caller_why_not, {"enable": "--second-header"})}
        return {check: ("skip", ctx.second_caller_why_not)}  # stdio: not applicable
    other = await ctx.open(ctx.second_caller)
    key, label = ctx.fresh("k"), ctx.fresh("scope")
    mine = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), mine)) is not None:
        return bad
    theirs = await ctx.call(RECORD, {"label": label}, key, wire=other)
    mine_again = await ctx.call(RECORD, {"label": label}, key)
    if theirs.same_result(mine) or theirs.error_type() in (
        "idempotency_key_conflict",
        "idempotency_key_in_progress",
    ):
        return {check: ("fail", f"the second caller was matched with the first: {theirs.show()}")}
    if theirs.executions != 2:
        return {check: ("fail", f"the second caller's call did not execute: {theirs.show()}")}
    return {
        check: _verdict(
            mine_again.same_result(mine),
            "one key, two callers: two executions; each caller replays its own result",
            f"the first caller's retry got {mine_again.show()}",
        )
    }


async def scope_across_connections(ctx: Context) -> Outcomes:
    check = "sep-3182-scope-across-connections"
    if ctx.reconnect is None:
        return {check: ("skip", "stdio: a new connection is a new process; nothing to check")}
    key, label = ctx.fresh("k"), ctx.fresh("reconnect")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    other = await ctx.open(ctx.reconnect)
    again = await ctx.call(RECORD, {"label": label}, key, wire=other)
    count = await ctx.count(label)
    where = "a new connection" + (" (a new session)" if ctx.era == LEGACY else "")
    if count == 1 and again.same_result(first):
        return {check: ("pass", f"the same credentials on {where} got the replay")}
    return {
        check: (
            "fail",
            f"the same credentials on {where} did not get the replay ({count} executions; "
            f"{again.show()}): per-session scoping is allowed by the SEP ('an "
            "OAuth-authenticated session') but makes retries after a reconnect unsafe",
        )
    }


async def shared_store(ctx: Context) -> Outcomes:
    check = "sep-3182-shared-store"
    if ctx.other_instance is None:
        if not isinstance(ctx.wire, HttpWire):  # nothing would run it: not counted as not run
            return {check: ("skip", "stdio: one process, no second instance to share a store")}
        why = "give --also URL, a second instance of the same deployment"
        return {check: ("skip", why, {"enable": "--also URL"})}
    other = await ctx.open(ctx.other_instance)
    probe = ctx.fresh("probe")
    await ctx.call(RECORD, {"label": probe})
    if await ctx.count(probe, wire=other) != 0:
        why = "both URLs reach one process (they share its counters)"
        return {check: ("skip", why, {"enable": "--also URL of another instance"})}
    key, label = ctx.fresh("k"), ctx.fresh("shared")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key, wire=other)
    executed_there = await ctx.count(label, wire=other)
    return {
        check: _verdict(
            executed_there == 0 and again.same_result(first),
            "the retry on the other instance got the original result, without executing",
            f"the other instance executed the retry ({executed_there} executions there)",
        )
    }


async def retention(ctx: Context) -> Outcomes:
    check = "sep-3182-retention-window"
    if ctx.retention is None:
        why = "give --retention SECONDS, the window the server documents"
        return {check: ("skip", why, {"enable": "--retention SECONDS"})}
    key, label = ctx.fresh("k"), ctx.fresh("ret")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    wait = max(0.0, min(ctx.retention * 0.5, ctx.retention - 1.0))
    await asyncio.sleep(wait)
    again = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1 and again.same_result(first),
            f"replayed after {wait:g} s of a documented {ctx.retention:g} s window",
            f"not replayed after {wait:g} s of a documented {ctx.retention:g} s window",
        )
    }
