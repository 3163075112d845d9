"""The reference covers every public name, and the proxy's configuration page every key.

Every name a program imports (`__all__` of each public module) must have an entry in the built
API reference, so a new export cannot ship undocumented. The proxy configuration page's tables
must list exactly the keys the proxy's parser accepts, with its real defaults: the page is
hand-written, and this keeps it from drifting away from `idemtools/proxy/config.py`.
"""

from __future__ import annotations

import ast
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from idemtools.proxy import config as proxy_config
from idemtools.proxy.scope import SCOPE_NAMES, scope_name
from tests.fixtures_docs.site import ROOT, project_site

PUBLIC_MODULES = [
    "idemtools",
    "idemtools.client",
    "idemtools.stores",
    "idemtools.testing",
    "idemtools.conformance",
    "idemtools.integrations.fastmcp",
    "idemtools.integrations.langchain",
    "idemtools.integrations.openai_agents",
    "idemtools.integrations.pydantic_ai",
    "idemtools.integrations.dbos",
    "idemtools.integrations.langgraph",
    "idemtools.integrations.temporal",
]

# Names documented under the module that defines them (lazy re-exports of optional drivers).
DEFINED_ELSEWHERE = {
    "idemtools.stores.RedisStore": "idemtools.stores.redis.RedisStore",
    "idemtools.stores.PostgresStore": "idemtools.stores.postgres.PostgresStore",
}


def _all_of(module: str) -> list[str]:
    """`__all__` read from the source: the integrations' frameworks need not be installed."""
    path = ROOT / Path(*module.split("."))
    source = (path / "__init__.py") if path.is_dir() else path.with_suffix(".py")
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert node.value is not None
                names = ast.literal_eval(node.value)
                assert isinstance(names, list)
                return [str(n) for n in names]
    raise AssertionError(f"{source} has no __all__")


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)


@pytest.mark.once
def test_every_public_name_has_an_entry_in_the_api_reference() -> None:
    parser = _Ids()
    parser.feed((project_site() / "reference" / "index.html").read_text(encoding="utf-8"))
    expected = [f"{m}.{name}" for m in PUBLIC_MODULES for name in _all_of(m)]
    assert len(expected) > 60
    missing = [name for name in expected if DEFINED_ELSEWHERE.get(name, name) not in parser.ids]
    assert missing == [], f"public names without an entry in docs/reference.md: {missing}"


# -- the proxy's configuration file ---------------------------------------------------------

PAGE = ROOT / "docs" / "proxy-config.md"


def _table(heading: str) -> dict[str, list[str]]:
    """The rows of the table under `## heading`, by their first cell's `code`."""
    text = PAGE.read_text(encoding="utf-8")
    assert f"\n## {heading}\n" in text, f"docs/proxy-config.md has no '## {heading}'"
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        match = re.match(r"\| `([a-z_]+)` \|(.*)\|$", line)
        if match:
            rows[match.group(1)] = [c.strip() for c in match.group(2).split(" | ")]
    return rows


def test_the_proxy_config_page_lists_exactly_the_keys_the_parser_accepts() -> None:
    assert set(_table("Top-level keys")) == proxy_config._TOP_KEYS
    assert set(_table("Policy keys")) == proxy_config._POLICY_KEYS


def test_the_proxy_config_page_quotes_the_real_defaults() -> None:
    defaults = proxy_config.parse({})
    top = _table("Top-level keys")
    # No store named: chosen by the transport (the default store), which the page describes.
    assert defaults.store is None
    assert "stdio" in top["store"][1] and '`"memory://"`' in top["store"][1]
    assert top["forward_key"][1] == f"`{str(defaults.forward_key).lower()}`"
    assert top["shutdown_grace"][1].startswith(f"`{defaults.shutdown_grace:g}`")
    policy = _table("Policy keys")
    seconds = {"retention": 86400.0, "lease": 60.0, "max_runtime": 3600.0}
    for key, value in seconds.items():
        assert getattr(defaults.default, key) == value, key
        assert proxy_config.duration(policy[key][1].strip('`"'), key) == value, key
    assert policy["scope"][1] == f'`"{scope_name(defaults.default.scope)}"`'
    assert policy["on_lapse"][1] == f'`"{defaults.default.on_lapse}"`'


def test_the_proxy_config_page_names_every_scope() -> None:
    cell = _table("Policy keys")["scope"][2]
    assert set(re.findall(r"`([a-z-]+)`", cell)) == set(SCOPE_NAMES)


# -- the operations page's metrics ----------------------------------------------------------

OPERATIONS = ROOT / "docs" / "operations.md"


def _first_cells(heading: str, header: str) -> set[str]:
    """The `code` first cells of the table whose header row starts with `header`, in the
    section under `## heading` of docs/operations.md."""
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    table = section.split(f"\n| {header} |", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\| `([a-z_.]+)` \|", table, re.MULTILINE))


def test_the_metrics_table_lists_every_engine_counter() -> None:
    from dataclasses import fields

    from idemtools.engine import EngineStats

    assert _first_cells("Metrics", "counter") == {f.name for f in fields(EngineStats)}


def test_the_opentelemetry_table_lists_every_instrument() -> None:
    source = (ROOT / "idemtools" / "engine" / "telemetry.py").read_text(encoding="utf-8")
    made = set(re.findall(r"meter\.create_\w+\(\s*\"([a-z_.]+)\"", source))
    assert len(made) >= 4, made
    documented = _first_cells("Observability: OpenTelemetry and `on_outcome`", "instrument")
    assert documented == made
