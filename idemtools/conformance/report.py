"""Results, the baseline of expected failures, the one-line-per-check text and the JSON report.

Exit codes, as the official MCP conformance suite's users expect them: 0 when every MUST check
passed or failed as the baseline expects; 1 when a MUST check failed unexpectedly or a baseline
entry is stale (it passed: remove it, so the baseline can only shrink); 2 is the runner's, when
the target cannot be reached or lacks the fixtures. SHOULD and MAY failures are reported and
counted, never fatal: the SEP lets a conforming server omit them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Baseline", "BaselineError", "Level", "Report", "Result", "Status"]

Level = Literal["MUST", "SHOULD", "MAY"]
Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Result:
    """One check's outcome in one protocol era."""

    id: str
    level: Level
    status: Status
    section: str
    detail: str
    era: str

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "level": self.level,
            "status": self.status,
            "section": self.section,
            "detail": self.detail,
            "era": self.era,
        }


class BaselineError(ValueError):
    """A baseline file that cannot be read or names an unknown check (exit code 2)."""


@dataclass(frozen=True)
class Baseline:
    """Expected failures: one check id per line; `#` starts a comment; blank lines are ignored."""

    ids: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str, known: Iterable[str]) -> Baseline:
        known_ids = set(known)
        ids: set[str] = set()
        for number, line in enumerate(text.splitlines(), 1):
            entry = line.split("#", 1)[0].strip()
            if not entry:
                continue
            if entry not in known_ids:
                raise BaselineError(f"line {number}: unknown check id {entry!r}")
            ids.add(entry)
        return cls(frozenset(ids))

    @classmethod
    def load(cls, path: str, known: Iterable[str]) -> Baseline:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise BaselineError(f"cannot read {path}: {exc.strerror}") from None
        return cls.parse(text, known)


@dataclass
class Report:
    target: str
    eras: Sequence[str]
    results: list[Result] = field(default_factory=list)
    baseline: Baseline = field(default_factory=Baseline)

    def failed_ids(self) -> set[str]:
        return {r.id for r in self.results if r.status == "fail"}

    def unexpected(self) -> list[str]:
        """MUST checks that failed and are not in the baseline (each id once, in run order)."""
        seen: list[str] = []
        for r in self.results:
            if (
                r.status == "fail"
                and r.level == "MUST"
                and r.id not in self.baseline.ids
                and r.id not in seen
            ):
                seen.append(r.id)
        return seen

    def expected(self) -> list[str]:
        return sorted(self.baseline.ids & self.failed_ids())

    def stale(self) -> list[str]:
        """Baseline entries that did not fail: the server now passes them."""
        return sorted(self.baseline.ids - self.failed_ids())

    def exit_code(self) -> int:
        return 1 if self.unexpected() or self.stale() else 0

    def summary(self) -> dict[str, Any]:
        count = {s: sum(1 for r in self.results if r.status == s) for s in ("pass", "fail", "skip")}
        failed_by_level = {
            level: sorted({r.id for r in self.results if r.status == "fail" and r.level == level})
            for level in ("MUST", "SHOULD", "MAY")
        }
        return {
            "eras": list(self.eras),
            "total": len(self.results),
            "passed": count["pass"],
            "failed": count["fail"],
            "skipped": count["skip"],
            "failed_must": failed_by_level["MUST"],
            "failed_should": failed_by_level["SHOULD"],
            "failed_may": failed_by_level["MAY"],
            "unexpected_failures": self.unexpected(),
            "expected_failures": self.expected(),
            "stale_baseline": self.stale(),
            "exit_code": self.exit_code(),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "checks": [r.as_json() for r in self.results],
            "summary": self.summary(),
        }

    def render_json(self) -> str:
        return json.dumps(self.as_json(), indent=2, ensure_ascii=False) + "\n"

    def lines(self) -> list[str]:
        """One line per check, then the summary: what a CI log should show."""
        out: list[str] = []
        for r in self.results:
            mark = r.status.upper()
            if r.status == "fail" and r.id in self.baseline.ids:
                mark = "XFAIL"
            out.append(f"{mark:<5} {r.level:<6} {r.id} [{r.era}] {r.detail}")
        s = self.summary()
        out.append(
            f"{s['total']} checks in {', '.join(self.eras) or 'no era'}: {s['passed']} passed, "
            f"{s['failed']} failed, {s['skipped']} skipped"
        )
        if s["unexpected_failures"]:
            out.append("MUST failures: " + ", ".join(s["unexpected_failures"]))
        if s["failed_should"]:
            out.append("SHOULD failures (not fatal): " + ", ".join(s["failed_should"]))
        if s["expected_failures"]:
            out.append("expected by the baseline: " + ", ".join(s["expected_failures"]))
        if s["stale_baseline"]:
            out.append(
                "stale baseline entries (they pass now; remove them): "
                + ", ".join(s["stale_baseline"])
            )
        out.append("conformant" if s["exit_code"] == 0 else "not conformant")
        return out
