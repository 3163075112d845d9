"""The key bridges on a standalone FastMCP 4 server, through FastMCP's own `Client`
over the transport that loses the first answer: a blind retry runs a tool twice without a bridge,
once with it.
"""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

from collections.abc import Iterator  # noqa: E402
from typing import Any  # noqa: E402

import anyio  # noqa: E402
import pytest  # noqa: E402
from fastmcp import Context, FastMCP  # noqa: E402
from fastmcp.server.middleware import Middleware  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

import idemtools  # noqa: E402
from idemtools import Registry, bridges, idempotent  # noqa: E402
from idemtools.policy import TOOL_META_KEY  # noqa: E402
from tests.fastmcp.lossy_shop import Shop, client_for  # noqa: E402

KEY = "idempotency_key"


class Seen(Middleware):
    """A FastMCP middleware: what arguments reach FastMCP's chain."""

    def __init__(self) -> None:
        self.arguments: list[dict[str, Any]] = []

    async def on_call_tool(self, context: Any, call_next: Any) -> Any:
        self.arguments.append(dict(context.message.arguments or {}))
        return await call_next(context)


def make_shop(**install: Any) -> tuple[Shop, Seen, list[tuple[str, str, str]]]:
    mcp = FastMCP("bridged-shop")
    shop = Shop(server=mcp)
    seen = Seen()
    mcp.add_middleware(seen)
    registry = Registry()
    outcomes: list[tuple[str, str, str]] = []

    @mcp.tool
    @idempotent(key_argument=KEY, registry=registry, scope=idemtools.shared)
    def charge(amount: int) -> dict[str, int]:
        shop.runs.append("charge")
        return {"amount": amount, "run": len(shop.runs)}

    @mcp.tool
    @idempotent(key_argument=KEY, key_header=True, registry=registry, scope=idemtools.shared)
    def refund(amount: int, idempotency_key: str | None = None) -> str:
        shop.runs.append(f"refund {idempotency_key}")
        return f"refunded {amount} with {idempotency_key}"

    @mcp.tool
    @idempotent(key_from=("order_id", "amount"), retention=600, registry=registry)
    def pay(order_id: str, amount: float, note: str = "") -> dict[str, Any]:
        shop.runs.append("pay")
        return {"order_id": order_id, "run": len(shop.runs)}

    @mcp.tool
    @idempotent(key_argument=KEY, registry=registry, scope=idemtools.shared)
    async def slow(n: int) -> str:
        shop.runs.append("slow")
        await shop.gate.wait()
        return f"slow {n}"

    @mcp.tool
    def plain(amount: int) -> dict[str, int]:
        shop.runs.append("plain")
        return {"amount": amount, "run": len(shop.runs)}

    def hook(tool: str, kind: str, context: Any) -> None:
        outcomes.append((tool, kind, context.key_source))

    idemtools.install(mcp, registry=registry, on_outcome=hook, **install)
    return shop, seen, outcomes


def data_type(exc: BaseException) -> Any:
    data = getattr(getattr(exc, "error", None), "data", None)
    return data.get("type") if isinstance(data, dict) else None


@pytest.fixture(autouse=True)
def _keep_bridged_names() -> Iterator[None]:
    names = set(bridges.BRIDGED)
    yield
    bridges.BRIDGED.clear()
    bridges.BRIDGED.update(names)


async def test_without_a_bridge_a_lost_answer_runs_twice() -> None:
    shop, _, _ = make_shop()
    async with client_for(shop) as client:
        with pytest.raises(MCPError):
            await client.call_tool("plain", {"amount": 5}, timeout=0.3)
        result = await client.call_tool("plain", {"amount": 5})
    assert result.data == {"amount": 5, "run": 2}


async def test_key_argument_runs_once_and_never_reaches_a_function_that_does_not_ask() -> None:
    shop, seen, outcomes = make_shop()
    async with client_for(shop) as client:
        with pytest.raises(MCPError):
            await client.call_tool("charge", {"amount": 5, KEY: "op-1"}, timeout=0.3)
        result = await client.call_tool("charge", {"amount": 5, KEY: "op-1"})
        assert result.data == {"amount": 5, "run": 1}
        asked = await client.call_tool("refund", {"amount": 2, KEY: "r-1"})
        assert asked.data == "refunded 2 with r-1"
    assert shop.runs == ["charge", "refund r-1"]
    # Stripped before FastMCP's chain for `charge` (FastMCP would refuse an unknown argument).
    assert seen.arguments == [{"amount": 5}, {"amount": 5}, {"amount": 2, KEY: "r-1"}]
    assert [(k, s) for t, k, s in outcomes if t == "charge"] == [
        ("executed", "argument"),
        ("replayed", "argument"),
    ]


async def test_key_argument_conflict_in_progress_invalid_and_the_sep_field_wins() -> None:
    from idemtools.integrations.fastmcp import KeyedClient

    shop, _, outcomes = make_shop()
    async with client_for(shop, drop=0) as client:
        await client.call_tool("charge", {"amount": 5, KEY: "op-1"})
        with pytest.raises(MCPError) as conflict:
            await client.call_tool("charge", {"amount": 6, KEY: "op-1"})
        assert data_type(conflict.value) == "idempotency_key_conflict"
        with pytest.raises(MCPError) as invalid:
            await client.call_tool("charge", {"amount": 5, KEY: ""})
        assert data_type(invalid.value) == "idempotency_key_invalid"
        keyed = KeyedClient(client)
        sep = await keyed.call_tool("charge", {"amount": 5, KEY: "x"}, idempotency_key="K")
        again = await keyed.call_tool("charge", {"amount": 5, KEY: "y"}, idempotency_key="K")
        assert sep.data == again.data == {"amount": 5, "run": 2}
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "slow", {"n": 1, KEY: "s"})
            with anyio.fail_after(5):
                while "slow" not in shop.runs:
                    await anyio.sleep(0.01)
            with pytest.raises(MCPError) as busy:
                await client.call_tool("slow", {"n": 1, KEY: "s"})
            assert data_type(busy.value) == "idempotency_key_in_progress"
            shop.gate.set()
    assert shop.runs.count("charge") == 2 and shop.runs.count("slow") == 1
    assert ("charge", "replayed", "sep") in outcomes


async def test_key_from_runs_once_and_other_arguments_conflict() -> None:
    shop, _, outcomes = make_shop()
    async with client_for(shop) as client:
        with pytest.raises(MCPError):
            await client.call_tool("pay", {"order_id": "A1", "amount": 5}, timeout=0.3)
        result = await client.call_tool("pay", {"order_id": "A1", "amount": 5.0})
        assert result.data == {"order_id": "A1", "run": 1}
        with pytest.raises(MCPError) as conflict:
            await client.call_tool("pay", {"order_id": "A1", "amount": 5, "note": "n"})
        assert data_type(conflict.value) == "idempotency_key_conflict"
    assert shop.runs == ["pay"]
    assert ("pay", "replayed", "derived") in outcomes


async def test_tools_list_schema_and_metadata() -> None:
    shop, _, _ = make_shop(advertise_tool_metadata=True)
    async with client_for(shop, drop=0) as client:
        listed = {t.name: t for t in await client.list_tools()}
    charge = listed["charge"].input_schema
    assert charge["properties"][KEY]["type"] == "string"
    assert KEY not in charge.get("required", [])
    assert "x-mcp-header" not in charge["properties"][KEY]
    assert listed["refund"].input_schema["properties"][KEY]["x-mcp-header"] == "Idempotency-Key"
    assert KEY not in listed["plain"].input_schema["properties"]
    meta = {name: (t.meta or {}).get(TOOL_META_KEY) for name, t in listed.items()}
    assert meta["charge"]["keySources"] == ["sep", "argument"]  # type: ignore[index]
    assert meta["pay"]["keyFrom"] == ["order_id", "amount"]  # type: ignore[index]
    assert meta["plain"]["keySources"] == ["sep"]  # type: ignore[index]


# -- key_from: the values FastMCP's own validation gives the function -------------------------


async def test_key_from_derives_from_the_values_the_tool_receives() -> None:
    """`"100"`, `"1e2"` and `100` are one amount to `amount: float`: one derived key, so one
    payment and two conflicts (as under a SEP key), never three payments. Arguments FastMCP's
    validation refuses run nothing and leave no record: the same refusal again is refused again,
    never replayed."""
    shop, _, outcomes = make_shop()
    async with client_for(shop, drop=0) as client:
        for _ in range(2):
            refused = await client.call_tool(
                "pay", {"order_id": "A1", "amount": "abc"}, raise_on_error=False
            )
            assert refused.is_error
        assert outcomes == []  # FastMCP answered; nothing ran, nothing recorded
        first = await client.call_tool("pay", {"order_id": "A1", "amount": "100"})
        assert first.data == {"order_id": "A1", "run": 1}
        for spelling in ("1e2", 100, 100.0):
            with pytest.raises(MCPError) as conflict:
                await client.call_tool("pay", {"order_id": "A1", "amount": spelling, "note": "x"})
            assert data_type(conflict.value) == "idempotency_key_conflict"
    assert shop.runs == ["pay"]
    assert outcomes == [("pay", "executed", "derived")] + [("pay", "conflict", "derived")] * 3


def pay_server(runs: list[str], **settings: Any) -> FastMCP:
    """A server with `pay` (its `Context` parameter injected, not an argument)."""
    mcp = FastMCP("payments", **settings)
    registry = Registry()

    @mcp.tool
    @idempotent(key_from=("order_id", "amount"), registry=registry)
    async def pay(order_id: str, amount: float, ctx: Context) -> str:
        runs.append(f"pay {amount!r}")
        return f"paid {order_id} {amount} #{len(runs)}"

    idemtools.install(mcp, registry=registry)
    return mcp


async def test_key_from_on_a_mounted_server_and_a_rename_is_that_tool_s_validation() -> None:
    """A mounted server's tool is validated by that server (its strict input validation
    refuses `"100"` for a float, and is not recorded); a `tool_names=` rename by the tool it
    renames. Equal values derive one key through either name."""
    runs: list[str] = []
    child = pay_server(runs, strict_input_validation=True)
    parent = FastMCP("front")
    parent.mount(child, namespace="shop")
    parent.mount(child, namespace="alias", tool_names={"pay": "settle"})
    outcomes: list[tuple[str, str]] = []
    idemtools.install(parent, on_outcome=lambda tool, kind, _: outcomes.append((tool, kind)))
    async with client_for(Shop(server=parent), drop=0) as client:
        await client.list_tools()  # names given by a mount are known from a listing
        for name in ("shop_pay", "alias_settle"):
            refused = await client.call_tool(
                name, {"order_id": "B2", "amount": "100"}, raise_on_error=False
            )
            assert refused.is_error
        assert runs == [] and outcomes == []  # refused by the child: nothing recorded
        first = await client.call_tool("shop_pay", {"order_id": "B2", "amount": 100})
        again = await client.call_tool("shop_pay", {"order_id": "B2", "amount": 100.0})
        renamed = await client.call_tool("alias_settle", {"order_id": "B2", "amount": 1e2})
        again_renamed = await client.call_tool("alias_settle", {"order_id": "B2", "amount": 100})
    assert first.data == again.data == "paid B2 100.0 #1"
    assert renamed.data == again_renamed.data == "paid B2 100.0 #2"  # another tool name
    assert runs == ["pay 100.0", "pay 100.0"]


async def test_key_from_with_an_injected_context_derives_from_the_validated_values() -> None:
    """The injected `Context` is no argument; `"7.5"` and `7.5` are one amount: an equal retry
    replays, the other spelling meets the record as a conflict."""
    runs: list[str] = []
    server = pay_server(runs)
    async with client_for(Shop(server=server)) as client:
        with pytest.raises(MCPError):  # the first answer is lost
            await client.call_tool("pay", {"order_id": "C3", "amount": "7.5"}, timeout=0.3)
        retried = await client.call_tool("pay", {"order_id": "C3", "amount": "7.5"})
        with pytest.raises(MCPError) as conflict:
            await client.call_tool("pay", {"order_id": "C3", "amount": 7.5})
        assert data_type(conflict.value) == "idempotency_key_conflict"
    assert retried.data == "paid C3 7.5 #1"
    assert runs == ["pay 7.5"]


async def test_key_from_on_a_tool_with_argument_transforms_is_the_arguments_as_sent() -> None:
    """A tool whose arguments are mapped before its parent validates them has no validation
    of its own to reuse: its key is derived from the arguments as sent (as for a low-level
    handler), so an equal retry replays and another spelling is another key."""
    from fastmcp.tools import Tool
    from fastmcp.tools.tool_transform import ArgTransform

    runs: list[str] = []
    mcp = FastMCP("transformed")
    registry = Registry()

    @idempotent(key_from=("order_id", "amount"), registry=registry)
    def pay(order_id: str, amount: float, note: str = "") -> str:
        runs.append(f"pay {amount!r}")
        return f"paid {order_id} {amount} #{len(runs)}"

    mcp.add_tool(
        Tool.from_tool(
            Tool.from_function(pay),
            transform_args={"note": ArgTransform(description="A note for the ledger")},
        )
    )
    idemtools.install(mcp, registry=registry)
    async with client_for(Shop(server=mcp)) as client:
        with pytest.raises(MCPError):
            await client.call_tool("pay", {"order_id": "D4", "amount": 5}, timeout=0.3)
        retried = await client.call_tool("pay", {"order_id": "D4", "amount": 5})
        other = await client.call_tool("pay", {"order_id": "D4", "amount": "5"})
    assert retried.data == "paid D4 5.0 #1"
    assert other.data == "paid D4 5.0 #2"
    assert runs == ["pay 5.0", "pay 5.0"]


async def test_a_bridge_under_another_name_holds_without_a_listing_first() -> None:
    """A tool listed under a name its function does not have (`name=`, a mounted server's
    namespace) takes its bridge from the server's first request: a client that calls it without
    listing the tools first (a fresh stdio process per call) is protected too."""
    runs: list[str] = []
    mcp = FastMCP("renamed")
    registry = Registry()

    @mcp.tool(name="settle")
    @idempotent(key_from=("order_id",), registry=registry)
    def pay(order_id: str) -> str:
        runs.append(order_id)
        return f"paid {order_id} #{len(runs)}"

    mcp.mount(pay_server(runs), namespace="shop")
    idemtools.install(mcp, registry=registry)
    assert "settle" not in bridges.BRIDGED  # not known by its function's name
    async with client_for(Shop(server=mcp)) as client:
        with pytest.raises(MCPError):  # the first answer is lost
            await client.call_tool("settle", {"order_id": "E5"}, timeout=0.3)
        retried = await client.call_tool("settle", {"order_id": "E5"})
    async with client_for(Shop(server=mcp)) as client:
        with pytest.raises(MCPError):
            await client.call_tool("shop_pay", {"order_id": "F6", "amount": 2}, timeout=0.3)
        mounted = await client.call_tool("shop_pay", {"order_id": "F6", "amount": 2})
    assert retried.data == "paid E5 #1"
    assert mounted.data == "paid F6 2.0 #2"
    assert runs == ["E5", "pay 2.0"]
