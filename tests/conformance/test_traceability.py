"""sep-3182.yaml: the official suite's traceability format, in step with the kit's checks.

The rows quote the SEP verbatim (` / ` joins sentences, `[...]` elides, nothing else), a check's
level is the keyword of its sentence or a stated reading, and sentences whose only keyword is MAY
are excluded rows. INFO checks and the base-spec checks are not SEP requirements: no row.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from idemtools.conformance import traceability
from idemtools.conformance.catalogue import CHECKS
from idemtools.conformance.checks import SEP_URL

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "idemtools" / "conformance" / "sep-3182.yaml"
KEYWORD = re.compile(r"\b(MUST|SHOULD|MAY)\b")
SEP_CHECKS = {c.id for c in CHECKS.values() if c.id.startswith("sep-3182-") and c.level != "INFO"}


def rows() -> list[dict[str, str]]:
    data = yaml.safe_load(YAML.read_text())
    assert data["sep"] == 3182 and data["spec_url"].endswith("/pull/3182")
    found: list[dict[str, str]] = data["requirements"]
    return found


def test_every_sep_check_has_exactly_one_row_with_its_sentence() -> None:
    checked = [r for r in rows() if "check" in r]
    assert sorted(r["check"] for r in checked) == sorted(SEP_CHECKS)
    for row in checked:
        assert set(row) <= {"check", "text", "url"}
        assert row["text"] == CHECKS[row["check"]].text


def test_info_and_base_spec_checks_have_no_row() -> None:
    listed = {r.get("check") for r in rows()}
    others = set(CHECKS) - SEP_CHECKS
    assert others and not (others & listed)
    assert {c for c in others if c.startswith("mcp-base-")} == {
        "mcp-base-error-codes-reserved",
        "mcp-base-error-codes-legacy",
        "mcp-base-error-object",
    }
    for check_id in others:
        info = CHECKS[check_id]
        assert info.level == "INFO" or info.base_spec
        assert info.url != SEP_URL or not info.base_spec


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_a_level_rests_on_its_sentence_or_a_stated_reading(check_id: str) -> None:
    info = CHECKS[check_id]
    keywords = set(KEYWORD.findall(info.text))
    assert info.level in ("MUST", "SHOULD", "INFO")
    if info.level != "INFO" and info.level not in keywords:
        assert len(info.reading) > 30, f"{check_id}: level {info.level} without its keyword"
    if info.level == "INFO":
        assert info.reading.startswith("INFO") or "INFO" in info.reading
    assert keywords != {"MAY"}, f"{check_id}: a MAY-only sentence must be an excluded row"


def test_no_editorial_text_inside_text() -> None:
    for row in rows():
        text = row["text"]
        assert "(2025-11-25" not in text and "(another tool name" not in text
        # Only the SEP's words: no parenthetical of the kit's own and no trailing notes.
        assert not re.search(r"\((?:variant|note|kit|idemtools)[^)]*\)", text), text


def test_may_only_sentences_are_excluded_rows() -> None:
    for row in rows():
        if set(KEYWORD.findall(row["text"])) == {"MAY"}:
            assert "excluded" in row, row["text"]


def test_excluded_rows_give_a_reason() -> None:
    excluded = [r for r in rows() if "check" not in r]
    assert len(excluded) >= 10
    for row in excluded:
        assert set(row) == {"text", "excluded"} and len(row["excluded"]) > 20


def test_the_package_ships_the_file() -> None:
    assert traceability() == YAML.read_text()


def _spec() -> str | None:
    for base in (ROOT.parent, ROOT.parent.parent, Path("/work")):
        candidate = base / "shared" / "spec" / "sep-3182-request-idempotency.md"
        if candidate.is_file():
            return candidate.read_text()
    return None


def _normal(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def test_every_row_quotes_the_sep_verbatim() -> None:
    spec = _spec()
    if spec is None:
        pytest.skip("the SEP text (shared/spec) is not beside this checkout")
    body = _normal(spec)
    for row in rows():
        for sentence in row["text"].split(" / "):
            for fragment in sentence.split("[...]"):
                fragment = _normal(fragment)
                assert not fragment or fragment in body, (row.get("check"), fragment)


def test_every_normative_sentence_of_the_sep_is_mapped() -> None:
    text = _spec()
    if text is None:
        pytest.skip("the SEP text (shared/spec) is not beside this checkout")
    body = text[text.index("## Specification") : text.index("## Rationale")]
    body += text[text.index("## Security Implications") : text.index("## References")]
    sentences = [
        s
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*\-])", " ".join(body.split()))
        if re.search(r"\b(MUST|SHOULD|MAY)\b", s) and "This is a SHOULD rather than" not in s
    ]
    assert len(sentences) >= 25
    texts = [" ".join(r["text"].split()) for r in rows()]
    windows = {t[i : i + 40] for t in texts for i in range(max(1, len(t) - 39))}
    unmapped = [s for s in sentences if not any(w in s for w in windows if len(w) == 40)]
    assert unmapped == []
