"""`idemtools docs` and the mkdocs plugin on a FastMCP server (the example), in child
processes the way users run them."""

from __future__ import annotations

from tests.fastmcp import require_fastmcp

require_fastmcp()

import shutil  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

from tests.fixtures_docs.site import (  # noqa: E402
    ROOT,
    describe_json,
    mkdocs_build,
    require_mkdocs,
)

SPEC = "examples.fastmcp_server:server"
OWN = {"charge": 86400.0, "refund_payment": 259200.0, "shipping_create_label": 86400.0}


def test_docs_cli_lists_fastmcp_tools_with_their_policies() -> None:
    described = describe_json(SPEC, ROOT)
    assert described["adapter"] == "fastmcp"
    tools = {t["name"]: t for t in described["tools"]}  # type: ignore[attr-defined]
    assert set(tools) == {*OWN, "quote", "ledger"}  # FastMCP names, not function names
    for name, seconds in OWN.items():
        assert tools[name]["policy"] == "own", name
        assert tools[name]["retention_seconds"] == seconds, name
    assert tools["quote"]["policy"] == "server default"


def test_mkdocs_plugin_documents_a_fastmcp_server(tmp_path: Path) -> None:
    require_mkdocs()
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "__init__.py").write_text("")
    shutil.copy(ROOT / "examples" / "fastmcp_server.py", tmp_path / "shop" / "server.py")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Shop\n\nSee [retention](retention.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(
            """\
            site_name: Shop
            nav:
              - Home: index.md
              - Retention: retention.md
            plugins:
              - idemtools:
                  servers: [shop.server:server]
            """
        )
    )
    done = mkdocs_build(config, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "site" / "retention" / "index.html").read_text(encoding="utf-8")
    for name in (*OWN, "quote", "ledger"):
        assert f'<code style="white-space: nowrap">{name}</code>' in page, name
    assert "3 days" in page  # refund_payment's own retention, found through name=
