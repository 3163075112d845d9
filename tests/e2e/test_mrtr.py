"""MRTR (2026-07-28): continuations are outside SEP-3182; `input_required` is never recorded."""

from __future__ import annotations

from typing import Any

import pytest

from .harness import LINE, MODERN, http_wire, make_app, serve_http

pytestmark = pytest.mark.skipif(LINE != 2, reason="multi round-trip requests exist on mcp 2.x")

if LINE == 2:  # module level: the SDK evaluates the tool's annotations in these globals
    # `LINE`, not `SDK2`: the tool below is checked on either line (Any on 1.x)
    import mcp_types as types  # type: ignore[import-not-found]
    from mcp.server.mcpserver import Context  # type: ignore[import-not-found]


def _confirm_tool(app: Any) -> None:
    @app.server.tool()
    async def confirm(amount: int, ctx: Context) -> str | types.InputRequiredResult:
        app.runs.append(("confirm", ctx.input_responses is not None))
        if ctx.input_responses is None:
            return types.InputRequiredResult(
                input_requests={
                    "ok": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(
                            message=f"pay {amount}?",
                            requested_schema={
                                "type": "object",
                                "properties": {"yes": {"type": "boolean"}},
                            },
                        )
                    )
                },
                request_state=f"amount={amount}",
            )
        return f"paid {amount}"


async def test_input_required_is_not_recorded_and_continuations_pass_through() -> None:
    app = make_app(auth=True, stateless=True)
    _confirm_tool(app)
    with serve_http(app, stateless=True) as url:
        async with http_wire(url, MODERN, token="tok-alice") as wire:
            params = {"name": "confirm", "arguments": {"amount": 5}, "idempotencyKey": "k-m"}
            first = await wire.call(params)
            assert first["result"]["resultType"] == "input_required"
            # Not a final outcome: the claim was released, so the same round runs again.
            again = await wire.call(params)
            assert again["result"]["resultType"] == "input_required"
            continuation = {
                **params,
                "requestState": again["result"]["requestState"],
                "inputResponses": {"ok": {"action": "accept", "content": {"yes": True}}},
            }
            done = await wire.call(continuation)
            assert done["result"]["content"][0]["text"] == "paid 5"
            # A continuation touches no record: the next first round still asks again.
            third = await wire.call(params)
            assert third["result"]["resultType"] == "input_required"
    assert app.runs == [
        ("confirm", False),
        ("confirm", False),
        ("confirm", True),
        ("confirm", False),
    ]


@pytest.mark.parametrize("field", ["requestState", "inputResponses"])
async def test_null_continuation_fields_count_as_absent(field: str) -> None:
    # The behaviour contract: only a non-null requestState / inputResponses makes a continuation; a
    # present-but-null one is a first round like any other, and the keyed retry replays.
    app = make_app(auth=True, stateless=True)
    with serve_http(app, stateless=True) as url:
        async with http_wire(url, MODERN, token="tok-alice") as wire:
            params = {
                "name": "charge",
                "arguments": {"amount": 3},
                "idempotencyKey": f"k-null-{field}",
                field: None,
            }
            first = await wire.call(params)
            again = await wire.call(params)
    assert first["result"]["content"] == again["result"]["content"]
    assert app.count("charge") == 1
