"""The key bridges over a real server, on the installed
mcp line: MCPServer (2.x) or FastMCP-in-mcp (1.x), and the low-level `Server`.

Every test counts what the tools really executed. Over the transport that loses the first answer
(`lossy_session`) a client that sends no `idempotencyKey` and retries blindly runs a tool twice;
with a bridge, once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

import idemtools
from idemtools import Registry, bridges, idempotent
from idemtools.client import call_tool
from idemtools.policy import TOOL_META_KEY
from idemtools.server.adapters import SDK2

from .harness import LINE, _Server, types
from .lossy import Loss, lossy_session, read_timeout

if SDK2:
    from mcp.server.lowlevel import Server as LowLevel
    from mcp.shared.exceptions import MCPError as SDK_ERROR
else:
    from mcp.server.lowlevel import Server as LowLevel  # type: ignore[no-redef]
    from mcp.shared.exceptions import McpError as SDK_ERROR  # type: ignore[attr-defined,no-redef]

LOST = read_timeout(0.3)
KEY = "idempotency_key"


class Shop:
    """An MCPServer (FastMCP on 1.x) with one tool per bridge, counting executions."""

    def __init__(self, **install: Any) -> None:
        self.runs: list[tuple[str, dict[str, Any]]] = []
        self.gate = anyio.Event()
        self.outcomes: list[tuple[str, str, str]] = []
        registry = Registry()
        server = _Server("shop")
        self.server = server

        @server.tool()
        @idempotent(key_argument=KEY, registry=registry)
        def charge(amount: int) -> str:
            self.runs.append(("charge", {"amount": amount}))
            return f"charged {amount} #{len(self.runs)}"

        @server.tool()
        @idempotent(key_argument=KEY, key_header=True, registry=registry)
        def refund(amount: int, idempotency_key: str | None = None) -> str:
            self.runs.append(("refund", {"amount": amount, KEY: idempotency_key}))
            return f"refunded {amount} with {idempotency_key}"

        @server.tool()
        @idempotent(key_from=("order_id", "amount"), retention=600, registry=registry)
        def pay(order_id: str, amount: float, note: str = "") -> str:
            self.runs.append(("pay", {"order_id": order_id, "amount": amount}))
            return f"paid {order_id} {amount:g} #{len(self.runs)}"

        @server.tool()
        @idempotent(key_from=("order_id", "amount"), registry=registry)
        def ship(order_id: str, amount: float) -> str:
            self.runs.append(("ship", {"order_id": order_id}))
            return f"shipped {order_id} #{len(self.runs)}"

        @server.tool()
        @idempotent(key_argument=KEY, registry=registry)
        async def slow(amount: int) -> str:
            self.runs.append(("slow", {"amount": amount}))
            await self.gate.wait()
            return "done"

        @server.tool()
        def plain(amount: int) -> str:
            self.runs.append(("plain", {"amount": amount}))
            return f"plain {amount} #{len(self.runs)}"

        async def hook(tool: str, kind: str, context: Any) -> None:
            self.outcomes.append((tool, kind, context.key_source))

        self.installation = idemtools.install(server, registry=registry, on_outcome=hook, **install)

    def count(self, tool: str) -> int:
        return sum(1 for name, _ in self.runs if name == tool)


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


def data_type(exc: BaseException) -> Any:
    data = getattr(getattr(exc, "error", None), "data", None)
    return data.get("type") if isinstance(data, dict) else None


async def lost_then_retried(session: Any, name: str, args: dict[str, Any], again: Any) -> Any:
    """What a blind retrying client does: the answer is lost, so it calls again."""
    with pytest.raises(SDK_ERROR):
        await session.call_tool(name, args, read_timeout_seconds=LOST)
    return await session.call_tool(name, again)


@pytest.fixture(autouse=True)
def _keep_bridged_names() -> Iterator[None]:
    names = set(bridges.BRIDGED)
    yield
    bridges.BRIDGED.clear()
    bridges.BRIDGED.update(names)


# -- key_argument ---------------------------------------------------------------------------------


async def test_without_a_bridge_a_lost_answer_runs_twice() -> None:
    shop = Shop()
    async with lossy_session(shop.server) as session:
        result = await lost_then_retried(session, "plain", {"amount": 5}, {"amount": 5})
    assert text_of(result) == "plain 5 #2"
    assert shop.count("plain") == 2


async def test_key_argument_a_lost_answer_runs_once() -> None:
    shop = Shop()
    args = {"amount": 5, KEY: "op-1"}
    async with lossy_session(shop.server) as session:
        result = await lost_then_retried(session, "charge", args, {"amount": 5.0, KEY: "op-1"})
    assert text_of(result) == "charged 5 #1"  # the first execution's answer, replayed
    assert shop.count("charge") == 1
    assert ("charge", "replayed", "argument") in shop.outcomes
    assert ("charge", "executed", "argument") in shop.outcomes


async def test_key_argument_a_new_value_is_a_new_operation_and_none_is_unprotected() -> None:
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        await session.call_tool("charge", {"amount": 5, KEY: "op-1"})
        await session.call_tool("charge", {"amount": 5, KEY: "op-2"})
        await session.call_tool("charge", {"amount": 5})
        await session.call_tool("charge", {"amount": 5, KEY: None})  # null: absent
        await session.call_tool("charge", {"amount": 5})
    assert shop.count("charge") == 5
    assert [kind for _, kind, _ in shop.outcomes] == ["executed", "executed"]


async def test_key_argument_conflict_in_progress_and_an_invalid_key() -> None:
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        await session.call_tool("charge", {"amount": 5, KEY: "op-1"})
        with pytest.raises(SDK_ERROR) as conflict:
            await session.call_tool("charge", {"amount": 6, KEY: "op-1"})
        assert data_type(conflict.value) == "idempotency_key_conflict"
        for bad in ("", "k" * 256, 42):
            with pytest.raises(SDK_ERROR) as invalid:
                await session.call_tool("charge", {"amount": 5, KEY: bad})
            assert data_type(invalid.value) == "idempotency_key_invalid"
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.call_tool, "slow", {"amount": 1, KEY: "s"})
            with anyio.fail_after(5):
                while shop.count("slow") == 0:
                    await anyio.sleep(0.01)
            with pytest.raises(SDK_ERROR) as busy:
                await session.call_tool("slow", {"amount": 1, KEY: "s"})
            assert data_type(busy.value) == "idempotency_key_in_progress"
            shop.gate.set()
    assert shop.count("charge") == 1
    assert shop.count("slow") == 1


async def test_the_sep_field_wins_and_the_argument_is_not_in_the_fingerprint() -> None:
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        first = await call_tool(session, "charge", {"amount": 5, KEY: "a"}, idempotency_key="K")
        # Same SEP key, another key argument: the argument is ignored, so a replay.
        again = await call_tool(session, "charge", {"amount": 5, KEY: "b"}, idempotency_key="K")
        assert text_of(again) == text_of(first) == "charged 5 #1"
        # The argument alone is another key ("a" is not "K"): a new operation.
        third = await session.call_tool("charge", {"amount": 5, KEY: "a"})
        assert text_of(third) == "charged 5 #2"
    assert shop.count("charge") == 2
    assert [s for _, _, s in shop.outcomes] == ["sep", "sep", "argument"]


async def test_the_argument_reaches_only_a_function_that_asks_for_it() -> None:
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        await session.call_tool("charge", {"amount": 5, KEY: "op-1"})  # no such parameter
        result = await session.call_tool("refund", {"amount": 5, KEY: "op-9"})
        assert text_of(result) == "refunded 5 with op-9"
        replay = await session.call_tool("refund", {"amount": 5, KEY: "op-9"})
        assert text_of(replay) == "refunded 5 with op-9"
    assert shop.runs == [("charge", {"amount": 5}), ("refund", {"amount": 5, KEY: "op-9"})]


async def test_tools_list_has_the_key_argument_and_the_metadata() -> None:
    shop = Shop(advertise_tool_metadata=True)
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}

    def schema(name: str) -> dict[str, Any]:
        tool = listed[name]
        return dict(tool.input_schema if LINE == 2 else tool.inputSchema)  # type: ignore[attr-defined]

    def meta(name: str) -> dict[str, Any]:
        return dict((listed[name].meta or {})[TOOL_META_KEY])

    prop = schema("charge")["properties"][KEY]
    assert prop["type"] == "string"
    assert "same value again when you retry" in prop["description"]
    assert "x-mcp-header" not in prop  # opt-in only
    assert KEY not in schema("charge").get("required", [])
    assert schema("refund")["properties"][KEY]["x-mcp-header"] == "Idempotency-Key"
    assert KEY not in schema("pay")["properties"] and KEY not in schema("plain")["properties"]
    assert meta("charge")["keySources"] == ["sep", "argument"]
    assert meta("charge")["keyArgument"] == KEY
    assert meta("pay")["keySources"] == ["sep", "derived"]
    assert meta("pay")["keyFrom"] == ["order_id", "amount"]
    assert meta("plain")["keySources"] == ["sep"]


# -- key_from -------------------------------------------------------------------------------------


async def test_key_from_a_lost_answer_runs_once_compared_canonically() -> None:
    shop = Shop()
    async with lossy_session(shop.server) as session:
        result = await lost_then_retried(
            session, "pay", {"order_id": "A1", "amount": 5}, {"amount": 5.0, "order_id": "A1"}
        )
    assert text_of(result) == "paid A1 5 #1"
    assert shop.count("pay") == 1
    assert ("pay", "replayed", "derived") in shop.outcomes


async def test_key_from_other_arguments_conflict_other_values_and_tools_do_not() -> None:
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        await session.call_tool("pay", {"order_id": "A1", "amount": 5})
        with pytest.raises(SDK_ERROR) as conflict:
            await session.call_tool("pay", {"order_id": "A1", "amount": 5, "note": "x"})
        assert data_type(conflict.value) == "idempotency_key_conflict"
        await session.call_tool("pay", {"order_id": "A1", "amount": 6})  # another operation
        await session.call_tool("ship", {"order_id": "A1", "amount": 5})  # another tool
        # A client's own key wins: a new operation, whatever the derived key says.
        await call_tool(session, "pay", {"order_id": "A1", "amount": 5}, idempotency_key="K")
    assert shop.count("pay") == 3
    assert shop.count("ship") == 1


async def test_key_from_derives_from_the_values_the_tool_receives() -> None:
    """`"100"`, `"1e2"` and `100` are one amount to `amount: float`: one derived key, so one
    payment and two conflicts (as under a SEP key), never three payments. Arguments the SDK's
    validation refuses run nothing and leave no record."""
    shop = Shop()
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        refused = await session.call_tool("pay", {"order_id": "A1", "amount": "abc"})
        assert getattr(refused, "is_error", None) or getattr(refused, "isError", None)
        assert shop.outcomes == []  # the SDK answered; nothing ran, nothing recorded
        await session.call_tool("pay", {"order_id": "A1", "amount": "100"})
        for spelling in ("1e2", 100):
            with pytest.raises(SDK_ERROR) as conflict:
                await session.call_tool("pay", {"order_id": "A1", "amount": spelling})
            assert data_type(conflict.value) == "idempotency_key_conflict"
    assert shop.count("pay") == 1


async def test_a_sent_key_never_meets_a_derived_record() -> None:
    """The derived key's text, sent as `idempotencyKey`: its own record, not the derived one's."""
    shop = Shop()
    args = {"order_id": "A1", "amount": 5}
    text = bridges.derived_key("pay", ("order_id", "amount"), args)
    async with lossy_session(shop.server, Loss(drop=0)) as session:
        derived = await session.call_tool("pay", args)
        sent = await call_tool(session, "pay", args, idempotency_key=text)
        again = await call_tool(session, "pay", args, idempotency_key=text)
    assert text_of(derived) == "paid A1 5 #1"
    assert text_of(sent) == text_of(again) == "paid A1 5 #2"
    assert shop.count("pay") == 2


async def test_the_docs_say_which_key_source_each_tool_takes() -> None:
    from idemtools.docs import describe, render_markdown

    shop = Shop()
    page = render_markdown(await describe(shop.server))
    assert "Keys without `idempotencyKey`" in page and "outside SEP-3182" in page
    assert "- `charge`: the argument `idempotency_key`" in page
    assert "- `pay`: derived from `order_id`, `amount`" in page
    assert "`plain`:" not in page


# -- the low-level Server -------------------------------------------------------------------------


def lowlevel_shop() -> tuple[Any, list[dict[str, Any]]]:
    registry = Registry()
    seen: list[dict[str, Any]] = []

    @idempotent(name="book", key_argument=KEY, registry=registry)
    def book(room: str) -> str:
        return f"booked {room} #{len(seen)}"

    @idempotent(name="order", key_from=("item",), registry=registry)
    def order(item: str) -> str:
        return f"ordered {item} #{len(seen)}"

    schema = {"type": "object", "properties": {"room": {"type": "string"}}}
    order_schema = {"type": "object", "properties": {"item": {"type": "string"}}}
    tools = [
        types.Tool.model_validate({"name": "book", "inputSchema": schema}),
        types.Tool.model_validate({"name": "order", "inputSchema": order_schema}),
    ]
    handlers: dict[str, Callable[..., str]] = {"book": book, "order": order}

    if SDK2:

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=tools)

        async def call(ctx: Any, params: Any) -> Any:
            arguments = dict(params.arguments or {})
            seen.append(arguments)
            text = handlers[params.name](**arguments)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        server: Any = LowLevel("lowlevel", on_list_tools=list_tools, on_call_tool=call)
    else:
        server = LowLevel("lowlevel")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools_1() -> list[Any]:
            return tools

        @server.call_tool()  # type: ignore[misc,no-untyped-call]
        async def call_1(name: str, arguments: dict[str, Any]) -> Any:
            seen.append(dict(arguments))
            return [types.TextContent(type="text", text=handlers[name](**arguments))]

    idemtools.install(server, registry=registry)
    return server, seen


async def test_lowlevel_key_argument_runs_once_and_the_handler_never_sees_it() -> None:
    server, seen = lowlevel_shop()
    async with lossy_session(server) as session:
        result = await lost_then_retried(
            session, "book", {"room": "r1", KEY: "b-1"}, {"room": "r1", KEY: "b-1"}
        )
        listed = {t.name: t for t in (await session.list_tools()).tools}
    assert text_of(result) == "booked r1 #1"
    assert seen == [{"room": "r1"}]  # stripped: the decorated function has no such parameter
    book = listed["book"]
    schema = book.input_schema if LINE == 2 else book.inputSchema  # type: ignore[attr-defined]
    assert KEY in schema["properties"]


async def test_lowlevel_key_from_runs_once() -> None:
    server, seen = lowlevel_shop()
    async with lossy_session(server) as session:
        result = await lost_then_retried(session, "order", {"item": "x"}, {"item": "x"})
    assert text_of(result) == "ordered x #1"
    assert len(seen) == 1


async def test_a_tool_renamed_from_its_function_is_bridged_from_the_first_call() -> None:
    """`@server.tool(name=...)` over a bare `@idempotent`: the decorator noted the function's
    name; `install()` notes the tool's own (and any later `tools/list` answer would)."""
    registry = Registry()
    server = _Server("renamed")
    runs: list[str] = []

    @server.tool(name="place_order_v2")
    @idempotent(key_from=("item",), registry=registry)
    def place(item: str) -> str:
        runs.append(item)
        return f"placed {item} #{len(runs)}"

    bridges.BRIDGED.discard("place_order_v2")
    idemtools.install(server, registry=registry)
    assert "place_order_v2" in bridges.BRIDGED
    async with lossy_session(server) as session:
        result = await lost_then_retried(session, "place_order_v2", {"item": "x"}, {"item": "x"})
    assert text_of(result) == "placed x #1"
    assert runs == ["x"]
