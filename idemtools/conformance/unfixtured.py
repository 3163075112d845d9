"""The checks that need no fixture tool: what the kit can say of a server the operator did not
write (a third-party server, direct or behind `idemtools proxy`).

Besides the capability and the base-spec error checks, which never call a tool: replay equality
on a tool the operator names (`--tool NAME --arguments JSON`; the kit sends it exactly those
arguments, one keyed call and one retry), a key that is not a string, and the shape of every
error object the run received. Where the fixture tools are there, the replay is judged through
them (`sep-3182-duplicate-*`, `sep-3182-replay-*`) and the named-tool checks do not apply.
"""

from __future__ import annotations

from typing import Any

from .contract import RECORD
from .scenario import Context, Outcome, Outcomes, Reply, Scenario, _cut, _cut_json
from .sep.replay import replay_outcomes
from .wire import LEGACY, MODERN, encode

__all__ = ["FIRST", "LAST", "OMITTABLE", "TOOL_OPTION"]

TOOL_OPTION = "--tool NAME --arguments JSON (a tool that is safe to run three times)"
_BOTH = frozenset({LEGACY, MODERN})


async def tool_replay(ctx: Context) -> Outcomes:
    """One keyed call of the operator's tool and its retry: the retry must be the original."""
    checks = ("sep-3182-tool-replay-returns-original", "sep-3182-tool-replay-json-equal")
    if ctx.fixtures_ok:  # the replay is judged through the fixtures: these are left out
        return {}
    if ctx.named_tool is None:
        why = "no fixture tools, and no tool named to call twice under one key"
        return dict.fromkeys(checks, ("skip", why, {"enable": TOOL_OPTION}))
    name, arguments = ctx.named_tool
    key = ctx.fresh("k")
    first = await ctx.call(name, dict(arguments), key)
    if first.result is None:
        why = f"the first keyed call of {name} was not a result: {first.show()}"
        return {checks[0]: ("fail", why), checks[1]: ("fail", why, {"blocked_by": checks[0]})}
    again = await ctx.call(name, dict(arguments), key)
    # The same judgement as the fixture replay checks: the allowance, the note, strictness.
    judged = replay_outcomes((checks[0], "raw", "meta", checks[1]), first, again)
    return {checks[0]: judged[checks[0]], checks[1]: judged[checks[1]]}


async def key_not_a_string(ctx: Context) -> Outcomes:
    """A key that is not a string (the number 42): refused with a JSON-RPC error, not run."""
    check = "sep-3182-malformed-key-refused"
    key: Any = 42
    if ctx.fixtures_ok:
        label = ctx.fresh("badkey")
        reply = await ctx.call(RECORD, {"label": label}, key)
        ran = await ctx.count(label)
        sent = f"{RECORD} with idempotencyKey 42"
    elif ctx.named_tool is not None:
        name, arguments = ctx.named_tool
        reply = await ctx.call(name, dict(arguments), key)
        ran = None if reply.error is not None else 1  # a result: it ran, or said it did
        sent = f"{name} with idempotencyKey 42"
    else:
        why = "no fixture tools, and no tool named to send a malformed key to"
        return {check: ("skip", why, {"enable": TOOL_OPTION})}
    return {check: _refused(reply, ran, sent)}


def _refused(reply: Reply, ran: int | None, sent: str) -> Outcome:
    if reply.error is not None and not ran:
        kind = reply.error_type()
        how = f"data.type {kind}" if kind else "no data.type"
        counted = "nothing ran" if ran == 0 else "the kit cannot count this tool's executions"
        return ("pass", f"sent {sent}: refused with a JSON-RPC error ({how}); {counted}")
    seen = reply.show()
    if ran:
        return ("fail", f"sent {sent}: the call ran ({ran} execution) and answered {seen}")
    return ("fail", f"sent {sent}: answered {seen}, not a JSON-RPC error")


async def error_object(ctx: Context) -> Outcomes:
    """Every error object this era's checks received: integer `code`, string `message`, and a
    string `data.type` where `data.type` is present."""
    check = "mcp-base-error-object"
    bad: list[str] = []
    for error, sent in ctx.errors:
        ctx.transcript.append({"request": _cut(sent), "answer": _cut_json({"error": error})})
        code, message = error.get("code"), error.get("message")
        data = error.get("data")
        kind = data.get("type", "") if isinstance(data, dict) else ""
        if type(code) is not int or not isinstance(message, str) or not isinstance(kind, str):
            bad.append(f"{encode(error)[:160]} (answering {sent[:120]})")
    if bad:
        return {check: ("fail", f"{len(bad)} malformed error objects: " + "; ".join(bad[:3]))}
    return {check: ("pass", f"{len(ctx.errors)} error answers, each a well-formed error object")}


def _scenario(run: Any, *checks: str, eras: frozenset[str] = _BOTH) -> Scenario:
    async def fresh_evidence(ctx: Context) -> Outcomes:
        ctx.transcript = []
        ctx.causes = {}
        return await run(ctx)  # type: ignore[no-any-return]

    return Scenario(run.__name__, checks, fresh_evidence, eras, fixtures=())


FIRST: tuple[Scenario, ...] = (
    _scenario(
        tool_replay, "sep-3182-tool-replay-returns-original", "sep-3182-tool-replay-json-equal"
    ),
)
LAST: tuple[Scenario, ...] = (
    _scenario(key_not_a_string, "sep-3182-malformed-key-refused"),
    _scenario(error_object, "mcp-base-error-object"),
)
# Scenarios whose checks are left out of a report where they do not concern the target (the
# named-tool replay, where the fixtures judge the same sentence); every other check is decided.
OMITTABLE = frozenset({"tool_replay"})
