"""The `sqlite:` URL rules in docs/stores.md hold: every example row is what `from_url` does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from idemtools.stores import InvalidStoreURLError, SQLiteStore, from_url

pytestmark = pytest.mark.sdk_free

DOC = Path(__file__).resolve().parents[1] / "docs" / "stores.md"


def _rows() -> list[tuple[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- sqlite-url-examples")[1].split("<!-- /sqlite-url-examples -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", table, flags=re.MULTILINE)
    assert len(rows) >= 8, table  # the table is there and was read
    return rows


@pytest.mark.parametrize(("url", "file"), _rows())
def test_each_documented_sqlite_url_opens_the_documented_file(url: str, file: str) -> None:
    if file.startswith("refused"):
        with pytest.raises(InvalidStoreURLError):
            from_url(url)
        return
    expected = re.fullmatch(r"`([^`]+)`", file)
    assert expected is not None, file
    store = from_url(url)  # opens nothing yet: the file is created at the first call
    assert isinstance(store, SQLiteStore)
    assert store.path == expected.group(1)


def test_the_rule_is_everything_up_to_the_query_as_written() -> None:
    for path in ("/a/b.db", "rel.db", "./x/y.db", "%41.db", "~/h.db", "//twice.db"):
        assert from_url(f"sqlite://{path}?max_records=3").path == path  # type: ignore[attr-defined]
    assert from_url("SQLite:///abs.db").path == "/abs.db"  # type: ignore[attr-defined]
