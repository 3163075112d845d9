"""A completed duplicate is not executed again and gets the recorded outcome, every kind of it.

A result (as a JSON value, as raw text, its `_meta`), an `isError` result and a JSON-RPC error
are each replayed; `replay_outcomes` judges one original answer and its retry, and serves the
fixture-free replay of a tool the operator names (`unfixtured`) as well.
"""

from __future__ import annotations

from typing import Any

from ..contract import FAIL, RECORD, THROW, throw_count, throw_uses_old_field
from ..defaults import without_defaults
from ..jsonvalues import raw_without, strict_equal
from ..scenario import Context, Outcomes, Reply, _all, _cut, _first, _noted, _verdict
from ..wire import encode

__all__ = ["duplicate", "error_replayed", "jsonrpc_error", "replay_identity", "replay_outcomes"]


async def duplicate(ctx: Context) -> Outcomes:
    checks = ("sep-3182-duplicate-not-executed", "sep-3182-duplicate-returns-original")
    key, label = ctx.fresh("k"), ctx.fresh("dup")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key)
    count = await ctx.count(label)
    return {
        checks[0]: _verdict(
            count == 1,
            "the retry was not executed (1 execution)",
            f"the retry was executed: {count} executions of one keyed call",
        ),
        checks[1]: _noted(
            _verdict(
                again.same_result(first),
                "the retry got the original result",
                f"the retry got {again.show()}, the original was {first.show()}",
            ),
            again.default_note(first),
        ),
    }


async def replay_identity(ctx: Context) -> Outcomes:
    checks = (
        "sep-3182-replay-json-identical",
        "sep-3182-replay-raw-identical",
        "sep-3182-replay-meta-identical",
        "sep-3182-replay-json-equal",
    )
    key, label = ctx.fresh("k"), ctx.fresh("ident")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, checks, first)) is not None:
        return bad
    again = await ctx.call(RECORD, {"label": label}, key)
    return replay_outcomes(checks, first, again)


def replay_outcomes(checks: tuple[str, ...], first: Reply, again: Reply) -> Outcomes:
    """The replay checks (JSON value with and without the default-member allowance, raw text,
    `_meta`) for one original answer and its retry."""
    if again.result is None or first.result is None:
        why = f"the retry was not a result: {again.show()} (the original: {first.show()})"
        return {
            c: ("fail", why, {"blocked_by": checks[0]} if c != checks[0] else {}) for c in checks
        }
    mine = {k: v for k, v in first.result.items() if k != "_meta"}
    theirs = {k: v for k, v in again.result.items() if k != "_meta"}
    out: Outcomes = {
        checks[0]: _noted(
            _verdict(
                strict_equal(without_defaults(mine), without_defaults(theirs)),
                "the replay is the same JSON value as the original (types included), _meta aside",
                f"the replay is another JSON value: {_first_difference(mine, theirs)}",
            ),
            again.default_note(first),
        ),
        checks[3]: _verdict(
            strict_equal(mine, theirs),
            "the replay is exactly the original's JSON value, _meta aside",
            f"the replay is not exactly the original: {_first_difference(mine, theirs)}",
        ),
    }
    if first.text is None or again.text is None:
        out[checks[1]] = ("skip", "the wire kept no raw text of the answers")
    else:
        raw_one = raw_without(first.text, "result", "_meta")
        raw_two = raw_without(again.text, "result", "_meta")
        out[checks[1]] = _verdict(
            raw_one is not None and raw_one == raw_two,
            "the replay's raw text outside _meta is the original's, byte for byte",
            f"the replay's raw text outside _meta differs: {_cut(str(raw_two))[:200]} "
            f"vs the original {_cut(str(raw_one))[:200]}",
        )
    meta_one, meta_two = first.result.get("_meta"), again.result.get("_meta")
    out[checks[2]] = _verdict(
        strict_equal(meta_one, meta_two),
        "the replay's _meta is the original's",
        f"the replay's _meta is {encode(meta_two)}, the original's {encode(meta_one)}",
    )
    return out


def _first_difference(a: Any, b: Any, path: str = "result") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k} is {'missing' if k not in b else 'new'} in the replay"
            if not strict_equal(a[k], b[k]):
                return _first_difference(a[k], b[k], f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not strict_equal(x, y):
                return _first_difference(x, y, f"{path}[{i}]")
    was, now = f"{encode(a)[:100]} ({_json_type(a)})", f"{encode(b)[:100]} ({_json_type(b)})"
    return f"{path} was {was}, replayed {now}"


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "real"
    return {str: "string", type(None): "null", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


async def error_replayed(ctx: Context) -> Outcomes:
    check = "sep-3182-error-replayed"
    key, label = ctx.fresh("k"), ctx.fresh("err")
    first = await ctx.call(FAIL, {"label": label}, key)
    if not first.is_error_result or first.executions is None:
        return {check: ("fail", f"{FAIL} did not answer an isError result: {first.show()}")}
    again = await ctx.call(FAIL, {"label": label}, key)
    count = await ctx.count(label)
    if count != 1:
        return {check: ("fail", f"the retry of an error was executed again ({count} executions)")}
    return {
        check: _verdict(
            again.same_result(first),
            "the isError result was replayed, not re-executed",
            f"the retry got {again.show()}, the original error was {first.show()}",
        )
    }


_NO_THROW = (
    f"the target does not list the {THROW} fixture tool (docs/conformance.md, the fixture "
    "contract; mcp 1.x FastMCP cannot answer a JSON-RPC error from a tool and does not list it)"
)


async def jsonrpc_error(ctx: Context) -> Outcomes:
    """`sep3182_throw` answers a JSON-RPC error: its retry is a replay; other arguments under
    its key are a conflict, not the recorded error."""
    checks = ("sep-3182-error-replayed-jsonrpc", "sep-3182-conflict-jsonrpc-error-record")
    if not await ctx.has_tool(THROW):
        return _all(checks, ("blocked", _NO_THROW, {"enable": f"the {THROW} fixture tool"}))
    key, label = ctx.fresh("k"), ctx.fresh("throw")
    first = await ctx.call(THROW, {"label": label, "payload": "first"}, key)
    if first.error is None or throw_count(first.error) != 1:
        why = f"{THROW} did not answer a JSON-RPC error with data.executions 1: {first.show()}"
        return {checks[0]: ("fail", why), checks[1]: ("fail", why, {"blocked_by": checks[0]})}
    again = await ctx.call(THROW, {"label": label, "payload": "first"}, key)
    count = await ctx.count(label)
    out: Outcomes = {}
    if count != 1:
        out[checks[0]] = (
            "fail",
            f"the retry of a JSON-RPC error was executed again ({count} executions)",
        )
    elif not again.same_error(first):
        out[checks[0]] = (
            "fail",
            f"the retry got {again.show()}, the original JSON-RPC error was {first.show()}",
        )
    else:
        older = throw_uses_old_field(first.error)
        out[checks[0]] = _noted(
            ("pass", "the JSON-RPC error was replayed, not re-executed"),
            f"{THROW} answers data.count where the contract names it data.executions: accepted"
            if older
            else None,
        )
    other = await ctx.call(THROW, {"label": label, "payload": "second"}, key)
    count_other = await ctx.count(label)
    if count_other != count:
        out[checks[1]] = (
            "fail",
            f"other arguments under a JSON-RPC error record were executed ({count_other} "
            "executions)",
        )
    elif other.same_error(first):
        out[checks[1]] = (
            "fail",
            f"the recorded JSON-RPC error was replayed for other arguments: {other.show()}",
        )
    else:
        out[checks[1]] = _verdict(
            other.rejected,
            f"other arguments were refused: {other.show()}",
            f"other arguments were not refused: {other.show()}",
        )
    return out
