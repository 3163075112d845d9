"""docs/bridges.md: its example (examples/bridged_server.py, written out in the page) does what
the page says over a transport that loses the first answer, on whichever mcp line is installed.

The code is written out (not an mkdocs include), so that the page reads the same on GitHub and in
an editor; a test keeps the two equal."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.lossy import Loss, lossy_session, read_timeout

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "bridges.md"
LOST = read_timeout(0.3)


@pytest.fixture(scope="module")
def example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bridged_server_example", ROOT / "examples" / "bridged_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def ledger(example: Any) -> Iterator[list[str]]:
    example.ledger.clear()
    yield example.ledger
    example.ledger.clear()


async def lost_then_retried(example: Any, name: str, arguments: dict[str, Any]) -> str:
    async with lossy_session(example.server) as session:
        with pytest.raises(Exception):  # noqa: B017  # the SDK's timeout error, per line
            await session.call_tool(name, arguments, read_timeout_seconds=LOST)
        result = await session.call_tool(name, arguments)
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_without_a_key_argument_a_blind_retry_orders_twice(
    example: Any, ledger: list[str]
) -> None:
    await lost_then_retried(example, "place_order", {"item": "tea", "quantity": 2})
    assert ledger == ["order 2 x tea", "order 2 x tea"]


async def test_with_the_key_argument_a_blind_retry_orders_once(
    example: Any, ledger: list[str]
) -> None:
    answer = await lost_then_retried(
        example, "place_order", {"item": "tea", "quantity": 2, "idempotency_key": "7f3c"}
    )
    assert answer == "order #1: 2 x tea"
    assert ledger == ["order 2 x tea"]


async def test_the_derived_key_pays_once(example: Any, ledger: list[str]) -> None:
    answer = await lost_then_retried(example, "pay_invoice", {"invoice_id": "F-9", "amount": 30})
    assert answer == "payment #1: 30 on F-9"
    assert ledger == ["paid 30 on F-9"]
    async with lossy_session(example.server, Loss(drop=0)) as session:  # another amount: new
        await session.call_tool("pay_invoice", {"invoice_id": "F-9", "amount": 31})
    assert len(ledger) == 2


def test_the_page_shows_the_example_as_it_is() -> None:
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(
        r'^```python title="examples/bridged_server\.py"\n(.*?)^```$', text, re.M | re.S
    )
    assert block is not None, "the page shows no block for examples/bridged_server.py"
    assert block.group(1) == (ROOT / "examples" / "bridged_server.py").read_text(encoding="utf-8")
    assert "--8<--" not in text  # shown raw wherever mkdocs does not render the page


def test_the_page_says_outside_the_sep_and_is_in_the_nav() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "Outside SEP-3182" in text
    assert "collapse into one" in text and "keep the retention short" in text
    assert "bridges.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "(bridges.md)" in (ROOT / "docs" / "clients.md").read_text(encoding="utf-8")
