"""The hand-written pages say what the code does: defaults quoted in docs/ are the real ones."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from idemtools.stores import SQLiteStore
from idemtools.stores import sqlite as sqlite_module

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    assert f"\n## {heading}\n" in text, f"docs/{page} has no '## {heading}' section"
    return text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_sqlite_section_quotes_the_real_defaults() -> None:
    section = _section("stores.md", "SQLiteStore")
    quoted = re.search(r"# SQLiteStore\(path, (.*?)\)\n", section.replace("\n#  ", ""), re.S)
    assert quoted is not None, "the SQLiteStore section shows its constructor's defaults"
    defaults = {
        name: eval(value, {"__builtins__": {}})  # the page's literals: 1 << 30, None, 5.0
        for name, value in (part.split("=") for part in re.split(r",\s*", quoted.group(1)))
    }
    signature = inspect.signature(SQLiteStore)
    assert defaults == {name: signature.parameters[name].default for name in defaults}
    assert set(defaults) == {
        name for name, p in signature.parameters.items() if name not in ("path", "clock")
    }
    assert signature.parameters["max_bytes"].default == 1 << 30 and "**1 GiB**" in section
    assert f"`RECORD_OVERHEAD` = {sqlite_module.RECORD_OVERHEAD} B" in section
    for topic in ("When to use it", "Durability", "Several processes", "Bound", "Cleanup"):
        assert f"**{topic}**" in section


def test_reference_documents_the_client_helper() -> None:
    assert "::: idemtools.client\n" in _section("reference.md", "Client helper")


def test_no_page_claims_fractions_are_exact_beyond_2_53() -> None:
    pages = [*DOCS.glob("*.md"), DOCS.parent / "README.md"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "even beyond 2^53" not in text, page
    numbers = (DOCS / "how-it-works.md").read_text(encoding="utf-8")
    assert "`9007199254740993.0` arrives as the double 2^53" in numbers
