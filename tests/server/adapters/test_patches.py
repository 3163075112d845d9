"""SDK class and model patches live in `idemtools.server.adapters.patches`, each applied once and
reported; importing `idemtools.client` changes nothing a server sees."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import idemtools
from idemtools.server.adapters import SDK2, patches
from tests.e2e.harness import make_app


def test_install_applies_the_key_field_once_and_reports_it() -> None:
    make_app()  # installs idemtools on a server of the installed line
    applied = patches.applied_patches()
    assert "CallToolRequestParams.idempotency_key" in applied["key_field"]
    patches.declare_key_field()
    patches.declare_key_field()
    assert patches.applied_patches() == applied  # a second application changes nothing


def test_applied_patches_is_a_copy() -> None:
    patches.applied_patches()["invented"] = "nothing"
    assert "invented" not in patches.applied_patches()


_PROBE = textwrap.dedent(
    """
    import json, sys
    import idemtools.client  # what is under test: this import alone
    from idemtools.server.adapters import SDK2, patches
    if SDK2:
        import mcp_types as types
    else:
        from mcp import types
    params = types.CallToolRequestParams
    parsed = params.model_validate({"name": "t", "arguments": {}, "idempotencyKey": "k"})
    cache = None
    try:
        from fastmcp.server.middleware.caching import ResponseCachingMiddleware
        cache = getattr(ResponseCachingMiddleware.on_call_tool, "__idemtools_bypass__", False)
    except ImportError:
        pass
    print(json.dumps({
        "declared": "idempotency_key" in params.model_fields,
        "typed": getattr(parsed, "idempotency_key", None),
        "cache_patched": cache,
        "applied": sorted(patches.applied_patches()),
    }))
    """
)


def test_importing_the_client_leaves_what_a_server_parses_unpatched() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["declared"] is False  # the server's request model: as the SDK ships it
    assert seen["typed"] is None
    assert seen["cache_patched"] in (None, False)  # FastMCP's response cache untouched
    # mcp 2.x: only the client's own class (ClientSession keeps the capability it reads).
    assert seen["applied"] == (["client_capability"] if SDK2 else [])


def test_the_capability_field_adds_nothing_to_a_server_without_idemtools() -> None:
    patches.declare_capability_field()
    if SDK2:
        import mcp_types as types

        caps = types.ServerCapabilities(tools=types.ToolsCapability(list_changed=True))
    else:
        from mcp import types  # type: ignore[no-redef]

        caps = types.ServerCapabilities(tools=types.ToolsCapability(listChanged=True))
    assert "idempotency" not in json.dumps(caps.model_dump(by_alias=True, exclude_none=True))
    assert idemtools  # the package stays importable alongside
