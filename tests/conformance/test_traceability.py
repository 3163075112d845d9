"""sep-3182.yaml: the official suite's traceability format, in step with the kit's checks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from idemtools.conformance import traceability
from idemtools.conformance.checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
YAML = ROOT / "idemtools" / "conformance" / "sep-3182.yaml"


def rows() -> list[dict[str, str]]:
    data = yaml.safe_load(YAML.read_text())
    assert data["sep"] == 3182 and data["spec_url"].endswith("/pull/3182")
    found: list[dict[str, str]] = data["requirements"]
    return found


def test_every_check_has_exactly_one_row_with_its_sentence() -> None:
    checked = [r for r in rows() if "check" in r]
    assert sorted(r["check"] for r in checked) == sorted(CHECKS)
    for row in checked:
        assert set(row) <= {"check", "text", "url"}
        assert row["text"] == CHECKS[row["check"]].text


def test_excluded_rows_give_a_reason() -> None:
    excluded = [r for r in rows() if "check" not in r]
    assert len(excluded) >= 10
    for row in excluded:
        assert set(row) == {"text", "excluded"} and len(row["excluded"]) > 20


def test_the_package_ships_the_file() -> None:
    assert traceability() == YAML.read_text()


def _spec() -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent, Path("/work")):
        candidate = base / "shared" / "spec" / "sep-3182-request-idempotency.md"
        if candidate.is_file():
            return candidate
    return None


def test_every_normative_sentence_of_the_sep_is_mapped() -> None:
    spec = _spec()
    if spec is None:
        pytest.skip("the SEP text (shared/spec) is not beside this checkout")
    text = spec.read_text()
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
