"""`idemtools proxy --docs`: the retention page of a proxied server, from the proxy's config and
the upstream's own `tools/list` (real upstream processes, stdio and HTTP)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.conformance.kit import free_port

from .helpers import PY, ROOT, UPSTREAM, upstream_argv
from .test_http import process

pytestmark = pytest.mark.slow

CONFIG = """
store = "memory://"
[default]
retention = "2h"
[tools.fail]
retention = "90s"
scope = "shared"
[tools."s*"]
retention = "7d"
lease = "45s"
"""


def docs(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "proxy.toml"
    path.write_text(CONFIG)
    argv = [PY, "-m", "idemtools.cli", "proxy", "--docs", "--config", str(path), *options]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_page_has_every_upstream_tool_with_its_retention_from_the_config(tmp_path: Path) -> None:
    done = docs(tmp_path, "--", *upstream_argv(tmp_path / "log"))
    assert done.returncode == 0, done.stderr
    # Tool names are unbreakable code on the page; read them back as plain `code`.
    page = re.sub(r'<code style="white-space: nowrap">(.*?)</code>', r"`\1`", done.stdout)
    rows = {line.split("|")[1].strip(): line for line in page.splitlines()
            if line.startswith("| `") and " *(" in line}  # fmt: skip
    assert set(rows) == {
        "`record` *(server default)*",
        '`fail` *(proxy config [tools."fail"])*',
        '`slow` *(proxy config [tools."s*"])*',
        '`sample` *(proxy config [tools."s*"])*',
        "`die` *(server default)*",
    }
    assert "2 hours (7200 s)" in rows["`record` *(server default)*"]
    assert "1 minute 30 seconds (90 s)" in rows['`fail` *(proxy config [tools."fail"])*']
    assert "7 days (604800 s)" in rows['`slow` *(proxy config [tools."s*"])*']
    assert "| 45 seconds |" in rows['`slow` *(proxy config [tools."s*"])*']
    assert "idempotency_key_conflict" in done.stdout


def test_json_over_http_and_flags_override_the_default(tmp_path: Path) -> None:
    port = free_port()
    upstream = [PY, str(UPSTREAM), str(tmp_path / "log"), "--http", str(port)]
    with process(upstream, port):
        done = docs(
            tmp_path,
            "--format",
            "json",
            "--retention",
            "3h",
            "--name",
            "billing",
            "--upstream",
            f"http://127.0.0.1:{port}/mcp",
        )
    assert done.returncode == 0, done.stderr
    page = json.loads(done.stdout)
    assert page["server"] == "billing"
    assert page["adapter"] == "idemtools proxy (Streamable HTTP)"
    tools = {t["name"]: t for t in page["tools"]}
    assert set(tools) == {"record", "slow", "fail", "die", "sample"}
    assert tools["record"]["retention_seconds"] == 3 * 3600  # --retention sets the default
    assert tools["fail"]["retention_seconds"] == 90  # a rule's own retention stays
    assert tools["slow"]["lease_seconds"] == 45


def test_an_upstream_that_cannot_be_listed_is_one_line_and_exit_1(tmp_path: Path) -> None:
    done = docs(tmp_path, "--", PY, "-c", "import sys; sys.exit(0)")
    assert done.returncode == 1
    assert done.stderr.startswith("idemtools proxy: error: the upstream exited")
    usage = docs(tmp_path)  # neither COMMAND nor --upstream
    assert usage.returncode == 2
