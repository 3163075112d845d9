"""docs/fastmcp.md's snippets run as written: the server, the client call, the test."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import re  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fastmcp.md"


def _blocks() -> list[str]:
    return re.findall(r"```python[^\n]*\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def test_the_page_uses_fastmcps_own_names_and_no_deprecated_client_string() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert 'mcp = FastMCP("payments")' in text
    assert 'Client("server.py")' not in text  # deprecated in FastMCP 4.2: Path("server.py")
    assert "server = FastMCP(" not in text


async def test_the_server_client_and_test_snippets_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = _blocks()
    server = next(b for b in blocks if 'mcp = FastMCP("payments")' in b)
    client = next(b for b in blocks if "async with Client(mcp)" in b)
    test = next(b for b in blocks if "assert_protected" in b)
    body = server.replace("    ...\n", '    return f"charged {amount} {currency}"\n')
    (tmp_path / "server.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "server", raising=False)
    namespace: dict[str, Any] = {}
    exec(test, namespace)  # imports `mcp` from server.py, defines the test function
    mcp = namespace["mcp"]
    run = "async def _client(mcp):\n" + textwrap.indent(client, "    ") + "    return result\n"
    exec(run, namespace)
    result = await namespace["_client"](mcp)
    assert result.content[0].text == "charged 5 usd"
    from idemtools.testing import assert_protected

    await assert_protected(mcp, "charge", {"amount": 1, "currency": "usd"})
    monkeypatch.delitem(sys.modules, "server", raising=False)
