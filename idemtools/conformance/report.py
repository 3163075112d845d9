"""Results, the baseline of expected failures, the one-line-per-check text and the JSON report.

Exit codes, as the official MCP conformance suite's users expect them: 0 when every MUST check
passed or failed as the baseline expects; 1 when a MUST check failed unexpectedly or a baseline
entry is stale (it passed: remove it, so the baseline can only shrink); 2 is the runner's, when
the target cannot be reached or lacks the fixtures. SHOULD and MAY failures are reported and
counted, never fatal: the SEP lets a conforming server omit them; INFO results (differences
idemtools promises to avoid but the SEP does not forbid) are reported and never fatal.

A check is `blocked` when the failure of another check in the same era already explains it (one
bug, one failure: the rest name it in `blocked_by`); a blocked MUST still fails the run. A MUST
check that could not run is counted: the last line never says `conformant` while one did not run,
and names what would run it; `require_all` makes such a skip fail the run.

The baseline is read in either of two shapes: one check id per line (the kit's own), or the
official MCP conformance suite's expected-failures YAML (`server:` list of `<scenario>` or
`<scenario>:<check-id>` entries; `client:` is ignored, the kit tests servers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Baseline", "BaselineError", "Level", "Report", "Result", "Status"]

Level = Literal["MUST", "SHOULD", "MAY", "INFO"]
Status = Literal["pass", "fail", "skip", "blocked"]
FAILED: tuple[Status, ...] = ("fail", "blocked")


@dataclass(frozen=True)
class Result:
    """One check's outcome in one protocol era.

    `text`/`url`: the spec sentence the check tests and where it is; `evidence`: the requests
    and answers that decided it; `blocked_by`: the failed check that explains a blocked one;
    `enable`: for a skip, what would run the check (an option, a fixture), None when nothing
    can (not applicable to this target).
    """

    id: str
    level: Level
    status: Status
    section: str
    detail: str
    era: str
    text: str = ""
    url: str = ""
    evidence: tuple[Mapping[str, Any], ...] = ()
    blocked_by: str | None = None
    enable: str | None = None

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "level": self.level,
            "status": self.status,
            "section": self.section,
            "detail": self.detail,
            "era": self.era,
        }
        if self.text:
            out["text"] = self.text
        if self.url:
            out["url"] = self.url
        if self.evidence:
            out["evidence"] = [dict(e) for e in self.evidence]
        if self.blocked_by is not None:
            out["blocked_by"] = self.blocked_by
        if self.status == "skip" and self.enable is not None:
            out["enable"] = self.enable
        return out


class BaselineError(ValueError):
    """A baseline file that cannot be read or names an unknown check (exit code 2)."""


_SECTION = re.compile(r"^([A-Za-z_][\w-]*):\s*(\[\s*\])?\s*(#.*)?$")
_ITEM = re.compile(r"^\s+-\s*(.*?)\s*$")


def _suite_yaml(text: str) -> dict[str, list[Any]] | None:
    """The official expected-failures shape (top-level `server:`/`client:` block lists of
    scalars), read without a YAML library; None when the text is a plain id list."""
    lines = [line for line in text.splitlines() if line.split("#", 1)[0].strip()]
    if not lines or not _SECTION.match(lines[0]):
        return None
    out: dict[str, list[Any]] = {}
    current: list[Any] | None = None
    for line in lines:
        section = _SECTION.match(line)
        if section:
            current = out.setdefault(section.group(1), [])
            continue
        item = _ITEM.match(line)
        if item is None or current is None:
            raise BaselineError(f"expected-failures YAML: cannot read {line.strip()!r}")
        value = item.group(1)
        if value.startswith(("'", '"')):
            quote = value[0]
            end = value.find(quote, 1)
            value = value[1:end] if end > 0 else value
        else:
            value = value.split(" #", 1)[0].strip()
        if re.search(r":\s", value) or value.endswith(":"):
            current.append({value: None})  # a mapping: the space-after-colon mistake
        else:
            current.append(value)
    return out


@dataclass(frozen=True)
class Baseline:
    """Expected failures: check ids, from a plain list or the official suite's YAML shape.

    Plain: one check id per line; `#` starts a comment; blank lines are ignored. YAML (a
    mapping with a `server:` list): each entry is a check id, `<scenario>:<check-id>`, or a
    scenario name alone (`scenarios` maps the kit's scenario names to their checks): as in the
    official suite, that scenario may fail (any of its checks), and the entry is stale only when
    none of them failed.
    """

    ids: frozenset[str] = frozenset()
    groups: tuple[tuple[str, frozenset[str]], ...] = ()  # whole-scenario entries

    def covers(self, check_id: str) -> bool:
        return check_id in self.ids or any(check_id in checks for _n, checks in self.groups)

    @classmethod
    def parse(
        cls,
        text: str,
        known: Iterable[str],
        scenarios: Mapping[str, Sequence[str]] | None = None,
    ) -> Baseline:
        known_ids = set(known)
        parsed = _suite_yaml(text)
        if parsed is not None:
            return cls._parse_suite(parsed, known_ids, dict(scenarios or {}))
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
    def _parse_suite(
        cls, parsed: dict[Any, Any], known: set[str], scenarios: dict[str, Sequence[str]]
    ) -> Baseline:
        unknown_keys = set(parsed) - {"server", "client"}
        if unknown_keys:
            raise BaselineError(
                f"expected-failures YAML: unknown section(s) {sorted(map(str, unknown_keys))}; "
                "the official shape has 'server' and 'client'"
            )
        entries = parsed.get("server") or []
        if not isinstance(entries, list):
            raise BaselineError("expected-failures YAML: 'server' must be a list")
        ids: set[str] = set()
        groups: dict[str, frozenset[str]] = {}
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                raise BaselineError(
                    f"expected-failures YAML: server entry {entry!r} is not '<scenario>' or "
                    "'<scenario>:<check-id>' (no space after the colon)"
                )
            scenario, sep, check = entry.strip().partition(":")
            if sep:
                if check not in known:
                    raise BaselineError(f"expected-failures YAML: unknown check id {check!r}")
                ids.add(check)
            elif scenario in known:
                ids.add(scenario)
            elif scenario in scenarios:
                groups[scenario] = frozenset(scenarios[scenario])
            else:
                raise BaselineError(
                    f"expected-failures YAML: unknown check id or scenario {scenario!r}"
                )
        return cls(frozenset(ids), tuple(sorted(groups.items())))

    @classmethod
    def load(
        cls,
        path: str,
        known: Iterable[str],
        scenarios: Mapping[str, Sequence[str]] | None = None,
    ) -> Baseline:
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise BaselineError(f"cannot read {path}: {exc.strerror}") from None
        return cls.parse(text, known, scenarios)


@dataclass
class Report:
    target: str
    eras: Sequence[str]
    results: list[Result] = field(default_factory=list)
    baseline: Baseline = field(default_factory=Baseline)
    require_all: bool = False

    def failed_ids(self) -> set[str]:
        return {r.id for r in self.results if r.status in FAILED}

    def unexpected(self) -> list[str]:
        """MUST checks that failed or were blocked and are not in the baseline (each id once, in
        run order)."""
        seen: list[str] = []
        for r in self.results:
            if (
                r.status in FAILED
                and r.level == "MUST"
                and not self.baseline.covers(r.id)
                and r.id not in seen
            ):
                seen.append(r.id)
        return seen

    def expected(self) -> list[str]:
        return sorted(c for c in self.failed_ids() if self.baseline.covers(c))

    def stale(self) -> list[str]:
        """Baseline entries that did not fail: the server now passes them (a whole-scenario
        entry when none of its checks failed)."""
        failed = self.failed_ids()
        groups = [name for name, checks in self.baseline.groups if not checks & failed]
        return sorted(self.baseline.ids - failed) + groups

    def skipped_must(self) -> list[str]:
        """MUST checks that did not run although something would run them (each id once)."""
        seen: list[str] = []
        for r in self.results:
            if r.status == "skip" and r.level == "MUST" and r.enable and r.id not in seen:
                seen.append(r.id)
        return seen

    def enablers(self) -> list[str]:
        """What would run the skipped MUST checks (options, fixtures), each once."""
        out: list[str] = []
        for r in self.results:
            if r.status == "skip" and r.level == "MUST" and r.enable and r.enable not in out:
                out.append(r.enable)
        return out

    def exit_code(self) -> int:
        if self.unexpected() or self.stale():
            return 1
        return 1 if self.require_all and self.skipped_must() else 0

    def summary(self) -> dict[str, Any]:
        count = {
            s: sum(1 for r in self.results if r.status == s)
            for s in ("pass", "fail", "skip", "blocked")
        }
        failed_by_level = {
            level: sorted({r.id for r in self.results if r.status in FAILED and r.level == level})
            for level in ("MUST", "SHOULD", "MAY", "INFO")
        }
        return {
            "eras": list(self.eras),
            "total": len(self.results),
            "passed": count["pass"],
            "failed": count["fail"],
            "skipped": count["skip"],
            "blocked": count["blocked"],
            "failed_must": failed_by_level["MUST"],
            "failed_should": failed_by_level["SHOULD"],
            "failed_may": failed_by_level["MAY"],
            "failed_info": failed_by_level["INFO"],
            "unexpected_failures": self.unexpected(),
            "expected_failures": self.expected(),
            "stale_baseline": self.stale(),
            "skipped_must": self.skipped_must(),
            "skipped_must_enable": self.enablers(),
            "require_all": self.require_all,
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
        """One line per check (naming the spec section), then the summary: what a CI log shows."""
        out: list[str] = []
        for r in self.results:
            mark = r.status.upper()
            if r.status in FAILED and self.baseline.covers(r.id):
                mark = "XFAIL"
            detail = r.detail
            if r.status == "blocked" and r.blocked_by:
                detail = f"blocked by {r.blocked_by}: {detail}"
            out.append(f"{mark:<7} {r.level:<6} {r.id} [{r.era}] {r.section}: {detail}")
        s = self.summary()
        out.append(
            f"{s['total']} checks in {', '.join(self.eras) or 'no era'}: {s['passed']} passed, "
            f"{s['failed']} failed, {s['blocked']} blocked, {s['skipped']} skipped"
        )
        if s["unexpected_failures"]:
            out.append("MUST failures: " + ", ".join(s["unexpected_failures"]))
        if s["failed_should"]:
            out.append("SHOULD failures (not fatal): " + ", ".join(s["failed_should"]))
        if s["failed_info"]:
            out.append("INFO differences (not fatal): " + ", ".join(s["failed_info"]))
        if s["expected_failures"]:
            out.append("expected by the baseline: " + ", ".join(s["expected_failures"]))
        if s["stale_baseline"]:
            out.append(
                "stale baseline entries (they pass now; remove them): "
                + ", ".join(s["stale_baseline"])
            )
        skipped = s["skipped_must"]
        if skipped:
            out.append(
                f"{len(skipped)} MUST check{'s' if len(skipped) != 1 else ''} did not run: "
                f"{', '.join(skipped)} (to run them: {'; '.join(s['skipped_must_enable'])})"
                + (" -- --require-all makes this fail the run" if not self.require_all else "")
            )
        if s["exit_code"] != 0:
            out.append("not conformant")
        elif skipped:
            out.append(f"incomplete: every MUST check that ran passed, {len(skipped)} did not run")
        else:
            out.append("conformant")
        return out
