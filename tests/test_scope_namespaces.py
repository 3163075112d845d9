"""The same key on tools with different scope strategies (docs/contract.md, Scope).

Same scope: the key is one namespace across tools, so another tool is a conflict. Different
scopes: separate namespaces, so each tool runs once and replays its own answer.
"""

from __future__ import annotations

from typing import Any

from idemtools import (
    AuthInfo,
    CallContext,
    Engine,
    Outcome,
    Policy,
    Registry,
    by_auth_subject,
    per_session,
    shared,
)
from idemtools.engine import ToolCall
from idemtools.stores import MemoryStore

ALICE = CallContext(
    transport="http", auth=AuthInfo(issuer="https://as.example", subject="alice"), session_id="s1"
)


class Tool:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    async def __call__(self) -> Outcome:
        self.calls += 1
        return Outcome(result={"content": [{"type": "text", "text": f"{self.name} #{self.calls}"}]})


def text(outcome: Outcome) -> Any:
    assert outcome.result is not None, outcome
    return outcome.result["content"][0]["text"]


def keyed(name: str, policy: Policy) -> ToolCall:
    return ToolCall(name=name, arguments={"x": 1}, key="k", context=ALICE, policy=policy)


async def test_same_scope_other_tool_is_a_conflict() -> None:
    engine = Engine(MemoryStore(), registry=Registry())
    a, b = Tool("a"), Tool("b")
    policy = Policy.of(scope=by_auth_subject)
    assert text(await engine.handle(keyed("a", policy), a)) == "a #1"
    refused = await engine.handle(keyed("b", policy), b)
    assert refused.error is not None
    assert refused.error["data"]["type"] == "idempotency_key_conflict"
    assert b.calls == 0


async def test_different_scopes_are_separate_namespaces() -> None:
    engine = Engine(MemoryStore(), registry=Registry())
    tools = {"a": Tool("a"), "b": Tool("b"), "c": Tool("c")}
    policies = {
        "a": Policy.of(scope=by_auth_subject),
        "b": Policy.of(scope=per_session),
        "c": Policy.of(scope=shared),
    }
    for _ in range(2):  # the second round replays each tool's own answer
        for name, tool in tools.items():
            assert text(await engine.handle(keyed(name, policies[name]), tool)) == f"{name} #1"
    assert all(tool.calls == 1 for tool in tools.values())
