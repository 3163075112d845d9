"""docs/clients.md's examples (examples/clients/*.py, included in the page) run as written.

Each connects to examples/payments_server.py over stdio, as a user's client would, and charges
once; a framework that is not installed skips its example.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, str(ROOT / "examples" / "payments_server.py")]
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
def test_example_runs_against_the_payments_server(name: str) -> None:
    framework = EXAMPLES[name]
    if framework is not None and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    if framework == "fastmcp":
        pytest.importorskip("fastmcp", minversion="4.0")
    module = _load(name)

    async def run() -> str:
        with anyio.fail_after(60):
            result: str = await module.main(SERVER)
            return result

    assert "charged 4200 usd (charge #1)" in anyio.run(run)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_page_includes_the_example(name: str) -> None:
    assert f'--8<-- "examples/clients/{name}.py"' in PAGE.read_text(encoding="utf-8")
