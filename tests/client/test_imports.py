"""Client code loads no server side (architecture: integrations need the client only).

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

import idemtools

PACKAGE = Path(__file__).resolve().parents[2] / "idemtools"
INTEGRATIONS = sorted(
    f"idemtools.integrations.{p.stem}"
    for p in (PACKAGE / "integrations").glob("*.py")
    if p.stem != "__init__"
)
CLIENT_MODULES = ["idemtools.client.keyed_session", *INTEGRATIONS]
# What client code may import from idemtools itself.
ALLOWED = {
    "idemtools",
    "idemtools.client",
    "idemtools.client._base",
    "idemtools.errors",
    "idemtools.canonical",
}
SERVER_SIDE = (
    "idemtools.engine",
    "idemtools.stores",
    "idemtools.server.adapters.mcp1",
    "idemtools.server.adapters.mcp2",
)
FRAMEWORK = {
    "idemtools.integrations.fastmcp": "fastmcp",
    "idemtools.integrations.openai_agents": "agents",
    "idemtools.integrations.pydantic_ai": "pydantic_ai",
    "idemtools.integrations.langchain": "langchain_mcp_adapters",
    "idemtools.integrations.temporal": "temporalio",
    "idemtools.integrations.dbos": "dbos",
    "idemtools.integrations.langgraph": "langgraph",
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
    assert _loaded_after(f"import {module}") == ()


def test_importing_idemtools_client_loads_no_server_side() -> None:
    assert _loaded_after("import idemtools.client") == ()
    assert _loaded_after("from idemtools.client import KeyedSession, call_tool") == ()


def test_the_facade_still_gives_every_public_name() -> None:
    # Lazy: `from idemtools import X` loads X's module then, and only then.
    code = (
        "import sys, idemtools\n"
        "before = 'idemtools.engine' in sys.modules\n"
        "from idemtools import Engine, install, idempotent\n"
        "import json; print(json.dumps([before, 'idemtools.engine' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [False, True]
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        idemtools.nothing_here  # noqa: B018


# What a server in the same process parses and serializes with: the SDK's own models. Printed
# by a fresh interpreter, once without and once after `import idemtools.client`.
_SERVER_VIEW = """
import json, sys
{statement}
from idemtools._sdk import SDK2
if SDK2:
    import mcp_types as types
else:
    from mcp import types
models = ("ToolsCapability", "ServerCapabilities", "InitializeResult", "CallToolRequestParams",
          "CallToolRequest", "ClientCapabilities")
view = {{name: sorted(getattr(types, name).model_fields) for name in models}}
view["schema"] = types.ToolsCapability.model_json_schema()
caps = types.ServerCapabilities(tools=types.ToolsCapability())
view["dumped"] = caps.model_dump(by_alias=True)
parsed = types.CallToolRequestParams.model_validate(
    {{"name": "t", "arguments": {{}}, "idempotencyKey": "k"}})
view["typed_key"] = getattr(parsed, "idempotency_key", None)
view["server_side"] = sorted(m for m in sys.modules if m.startswith({server_side!r}))
print(json.dumps(view, sort_keys=True, default=str))
"""


def _server_view(statement: str) -> dict[str, object]:
    code = _SERVER_VIEW.format(statement=statement, server_side=SERVER_SIDE)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    view: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return view


def test_importing_idemtools_client_changes_nothing_a_server_sees() -> None:
    """The SDK's models as it ships them, and no server code loaded."""
    untouched = _server_view("import idemtools._sdk")
    after = _server_view("import idemtools.client\nimport idemtools.client.keyed_session")
    assert after == untouched
    assert after["server_side"] == []
    assert "idempotency" not in after["ToolsCapability"]  # type: ignore[operator]
    assert after["typed_key"] is None


_PURE_CLIENT = """
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from idemtools.client import KeyedSession, advertises_idempotency

async def main():
    # The whole environment: the server's default store lives under XDG_STATE_HOME.
    server = StdioServerParameters(command=sys.executable, args=[{server!r}], env=dict(os.environ))
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as raw:
            await raw.initialize()
            session = KeyedSession(raw)
            advertised = await advertises_idempotency(session)
            first = await session.call_tool("charge", {{"amount": 5}}, idempotency_key="pure-1")
            again = await session.call_tool("charge", {{"amount": 5}}, idempotency_key="pure-1")
            ledger = await raw.call_tool("ledger", {{}})
    text = lambda r: " ".join(getattr(b, "text", "") for b in r.content)
    print(json.dumps({{
        "advertised": advertised, "first": text(first), "again": text(again),
        "ledger": text(ledger),
        "server_side": sorted(m for m in sys.modules if m.startswith({server_side!r})),
    }}))

anyio.run(main)
"""


@pytest.mark.slow
def test_a_client_only_process_sends_keys_and_reads_the_capability() -> None:
    """No server in this process has declared anything: the client's own models carry it."""
    server = PACKAGE.parent / "examples" / "payments_server.py"
    code = _PURE_CLIENT.format(server=str(server), server_side=SERVER_SIDE)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["advertised"] is True
    assert seen["first"] == seen["again"]  # the second call replayed: the key reached the server
    assert '"charges": 1' in seen["ledger"] or '"charges":1' in seen["ledger"], seen["ledger"]
    assert seen["server_side"] == []


async def test_advertises_idempotency_is_awaited_and_its_old_sync_use_warns() -> None:
    from idemtools.client._base import Advertised

    assert await Advertised(True) is True
    assert await Advertised(False) is False
    with pytest.warns(DeprecationWarning, match="await advertises_idempotency"):
        assert bool(Advertised(True)) is True
    with pytest.warns(DeprecationWarning):
        assert not Advertised(False)


def test_the_client_key_digest_is_the_servers() -> None:
    from idemtools.client._base import key_digest
    from idemtools.engine import key_digest as server_digest

    for key in ("k", "ключ", "a" * 300, "\ud800"):
        assert key_digest(key) == server_digest(key)
