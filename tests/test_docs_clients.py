"""docs/clients.md's examples (examples/clients/*.py, included in the page) run as written.

Each connects to examples/payments_server.py over stdio, as a user's client would, and charges
once; a framework that is not installed skips its example. The page shows each file inline, as
it is, and each runs from any working directory.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = {
    "keyed_session": None,
    "fastmcp_client": "fastmcp",
    "openai_agents": "agents",
    "pydantic_ai_toolset": "pydantic_ai",
    "langchain_tools": "langchain_mcp_adapters",
}
PAGE = ROOT / "docs" / "clients.md"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        f"client_example_{name}", ROOT / "examples" / "clients" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_against_the_payments_server(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    framework = EXAMPLES[name]
    if framework is not None and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    if framework == "fastmcp":
        pytest.importorskip("fastmcp", minversion="4.0")
    module = _load(name)
    # The server gets the SDK's default environment (HOME, not XDG_STATE_HOME): its default
    # store on stdio must land in a temporary home, never the real one.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the example finds the server from its own file

    async def run() -> str:
        with anyio.fail_after(60):
            result: str = await module.main()
            return result

    assert "charged 4200 usd (charge #1)" in anyio.run(run)


def _shown(name: str) -> str:
    """The code block titled with the example's path on the page."""
    page = PAGE.read_text(encoding="utf-8")
    match = re.search(
        rf'^```python title="examples/clients/{name}\.py"\n(.*?)^```$', page, re.M | re.S
    )
    assert match is not None, f"docs/clients.md shows no block for examples/clients/{name}.py"
    return match.group(1)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_shows_the_example_as_it_is(name: str) -> None:
    """Inline, not an include: the page reads right where mkdocs does not render it (GitHub,
    an editor), and it is the file that runs."""
    example = (ROOT / "examples" / "clients" / f"{name}.py").read_text(encoding="utf-8")
    assert _shown(name) == example
