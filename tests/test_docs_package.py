"""`idemtools.docs` as a package: its public names, the one regex-parser touch point, the one
store-text function.

The generated output itself is pinned by tests/test_docs.py (golden files); these tests pin the
seams the split introduced, so a later change cannot quietly widen them.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import anyio
import pytest

import idemtools.docs as docs
from idemtools import install
from idemtools.docs import DocsError, describe, example_arguments, render_markdown
from idemtools.docs import examples as docs_examples
from idemtools.docs import model as docs_model
from idemtools.docs.store_text import store_text
from idemtools.server.adapters import SDK2
from idemtools.stores.base import StoreInfo
from idemtools.stores.memory import MemoryStore

PATTERNED = {
    "type": "object",
    "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
    "required": ["code"],
}
"""A pattern no placeholder matches: the example has to be read off the regex's parse tree."""


def test_every_name_imported_before_the_split_is_still_importable() -> None:
    # What the command, the mkdocs plugin, the tests and docs/*.md import from idemtools.docs.
    names = {
        "DocsError",
        "ErrorDoc",
        "NotInstalledError",
        "ServerDoc",
        "ServerImportError",
        "SpecError",
        "StoreDoc",
        "ToolDoc",
        "describe",
        "example_arguments",
        "format_duration",
        "load_server",
        "module_file",
        "parse_spec",
        "render_json",
        "render_markdown",
        "render_page",
    }
    assert set(docs.__all__) == names
    for name in names | {"JSON_SCHEMA", "EXAMPLE_KEY", "EXAMPLE_WIDTH"}:
        assert getattr(docs, name) is not None, name
    assert docs.JSON_SCHEMA == "idemtools.docs/1"


def test_a_pattern_example_is_read_off_the_regex_parser() -> None:
    assert example_arguments(PATTERNED) == {"code": "AAA-00"}
    assert callable(docs_examples.regex_parser().parse)


def test_a_missing_regex_parser_fails_loudly_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: any failure reaching `re._parser` was swallowed and the example silently became a
    # placeholder the schema refuses. A Python release that moves it must be an error instead.
    name = docs_examples._PARSER_MODULE
    monkeypatch.setitem(sys.modules, name, None)  # makes `import re._parser` fail
    with pytest.raises(DocsError, match=name.replace(".", r"\.")):
        example_arguments(PATTERNED)


def test_a_changed_regex_parser_fails_loudly_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    name = docs_examples._PARSER_MODULE
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))  # no `parse`
    with pytest.raises(DocsError, match=rf"{name.replace('.', '[.]')}\.parse"):
        example_arguments(PATTERNED)


def test_a_pattern_the_parse_tree_cannot_serve_still_falls_back_quietly() -> None:
    # "Unsure" stays a placeholder, not an error: only a missing parser is loud.
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": r"(a)\1"}}}
    schema["required"] = ["x"]
    assert example_arguments(schema) == {"x": "string"}


def test_store_text_is_the_one_place_the_page_learns_about_the_store() -> None:
    info = store_text(MemoryStore(max_records=500, max_bytes=1 << 20, max_records_per_scope=7))
    assert isinstance(info, StoreInfo)
    assert (info.kind, info.label) == ("memory", "in-process memory")
    assert (info.max_records, info.max_bytes, info.max_records_per_scope) == (500, 1 << 20, 7)

    class Custom:
        kind = "custom"

    custom = store_text(Custom())  # type: ignore[arg-type]  # deliberately not a whole Store
    assert custom.label == "custom store (custom)"
    assert custom.bound is None and custom.max_records is None


def test_describe_reads_the_store_only_through_store_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The merge-time switch to `store_info(store)` changes `store_text` alone: `describe` must
    # take every word and bound of the store section from the StoreInfo it returns.
    from mcp.server.lowlevel import Server

    server: Any = Server("store-words")
    install(server, store=MemoryStore())
    said = StoreInfo(
        kind="vault",
        label="the vault",
        description="vault (test)",
        restarts="Kept for ever.",
        instances="One per planet.",
        bound="the vault's doors",
        max_records_per_scope=3,
    )
    monkeypatch.setattr(docs_model, "store_text", lambda store: said)
    page = render_markdown(anyio.run(describe, server))
    assert "Records are kept in **the vault** (`vault`)" in page
    assert "- **Restarts**: Kept for ever." in page
    assert "- **Several instances**: One per planet." in page
    assert "- **Bound**: the vault's doors. At the bound" in page
    assert "at most 3 live records per scope" in page


# -- a low-level server's page lists what its tools/list returns ---------------


def _lowlevel_with_add() -> Any:
    """A low-level server of the installed SDK line whose `tools/list` answers one tool, `add`."""
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    if SDK2:  # mcp 2.x
        import mcp_types as types
        from mcp.server.lowlevel import Server

        async def list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=[types.Tool(name="add", input_schema=schema)])

        return Server("low-docs", on_list_tools=list_tools)
    else:
        from mcp import types as types1
        from mcp.server.lowlevel import Server as Server1

        server: Any = Server1("low-docs")

        @server.list_tools()  # type: ignore[misc,no-untyped-call]
        async def list_tools1() -> list[Any]:
            return [types1.Tool(name="add", inputSchema=schema)]

        return server


def test_a_lowlevel_servers_page_lists_only_the_tools_it_lists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Before (mcp 2.x): every @idempotent name in the process-wide registry was a row, here
    # `unrelated_elsewhere`, a function of some other module this server never serves.
    from idemtools import default_registry, idempotent

    monkeypatch.setattr(default_registry, "_policies", dict(default_registry._policies))
    monkeypatch.setattr(default_registry, "_entries", dict(default_registry._entries))

    @idempotent(retention=300)
    def unrelated_elsewhere() -> None:
        return None

    @idempotent(name="add", retention=90)
    def add_handler(x: int) -> int:
        return x

    server = _lowlevel_with_add()
    install(server, store=MemoryStore())
    doc = anyio.run(describe, server)
    assert [t.name for t in doc.tools] == ["add"]
    (add,) = doc.tools
    assert add.policy == "own" and add.retention_seconds == 90.0  # found by its name
    assert add.example_arguments == {"x": 1}  # the schema its tools/list gives
