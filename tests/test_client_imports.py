"""Client code loads no server side (issue 19; architecture: integrations need the client only).

A client (an agent, a FastMCP `Client`) that imports KeyedSession or an integration must not
pay for, or be exposed to, the engine, the stores or the server adapters.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "idemtools"
INTEGRATIONS = sorted(
    f"idemtools.integrations.{p.stem}"
    for p in (PACKAGE / "integrations").glob("*.py")
    if p.stem != "__init__"
)
CLIENT_MODULES = ["idemtools.keyed_session", *INTEGRATIONS]
# What client code may import from idemtools itself.
ALLOWED = {
    "idemtools",
    "idemtools.client",
    "idemtools._client_base",
    "idemtools.errors",
    "idemtools.canonical",
}
SERVER_SIDE = (
    "idemtools.engine",
    "idemtools.stores",
    "idemtools.adapters.mcp1",
    "idemtools.adapters.mcp2",
)
FRAMEWORK = {
    "idemtools.integrations.fastmcp": "fastmcp",
    "idemtools.integrations.openai_agents": "agents",
    "idemtools.integrations.pydantic_ai": "pydantic_ai",
    "idemtools.integrations.langchain": "langchain_mcp_adapters",
}


def _path(module: str) -> Path:
    return PACKAGE.parent / (module.replace(".", "/") + ".py")


def _idemtools_imports(module: str) -> set[str]:
    """Every idemtools module `module` imports, resolved (relative imports included)."""
    tree = ast.parse(_path(module).read_text())
    package = module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("idemtools")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            if name.startswith("idemtools"):
                found.add(name)
    return found


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_client_modules_import_only_client_side_idemtools(module: str) -> None:
    allowed = ALLOWED | set(CLIENT_MODULES) | {"idemtools.integrations"}
    assert _idemtools_imports(module) <= allowed


@functools.cache
def _loaded_after(statement: str) -> tuple[str, ...]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return tuple(m for m in json.loads(out.stdout) if m.startswith(SERVER_SIDE))


@pytest.mark.parametrize("module", CLIENT_MODULES)
def test_importing_client_modules_loads_no_server_side(module: str) -> None:
    framework = FRAMEWORK.get(module)
    if framework is not None and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    loaded = _loaded_after(f"import {module}")
    if loaded and _loaded_after("import idemtools.client"):
        # Issue 18 makes `import idemtools` / `idemtools.client` light; until it lands, the
        # package itself loads the engine, and this module can add nothing to that.
        pytest.xfail("idemtools.client itself still loads the server side (issue 18 item 9)")
    assert loaded == ()
