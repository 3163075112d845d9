"""docs/durable-workflows.md shows each engine's example as the file the crash proofs run.

The code is written out in the page (not an mkdocs include), so that it reads the same on
GitHub and in an editor; this test keeps the two equal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "durable-workflows.md"


@pytest.mark.parametrize("name", ["durable_dbos", "durable_langgraph", "durable_temporal"])
def test_the_page_shows_the_example_as_it_is(name: str) -> None:
    page = PAGE.read_text(encoding="utf-8")
    match = re.search(rf'^```python title="examples/{name}\.py"\n(.*?)^```$', page, re.M | re.S)
    assert match is not None, f"the page shows no block for examples/{name}.py"
    assert match.group(1) == (ROOT / "examples" / f"{name}.py").read_text(encoding="utf-8")
