"""Results, the baseline of expected failures, the one-line-per-check text and the JSON report.

The vocabulary, defined here once (docs/conformance.md, "Reading the report"):

- `pass`: the check ran and the server did what the sentence requires.
- `note`: it passed, with an allowance the kit made that a reader should know of (a replay that
  differs only by a member holding its schema default, a fixture answering an older field name).
  Counted as passed.
- `fail`: the check ran and the server broke the sentence.
- `blocked`: not decided on its own. With `blocked_by` (a check id), another check's failure in
  the same era explains it: one bug, one failure, and the blocked check counts as failed at its
  level. Without `blocked_by`, the target lacks a fixture tool the check needs (`enable` says
  which and how to add it): nothing failed, the run is incomplete.
- `skip`: did not run. With `enable`, an option would run it (the run is incomplete); without,
  it cannot apply to this target (stdio has no second instance) or the server made a choice the
  SEP allows that leaves nothing to check (it restricts its keys).
- `fixture-error`: a fixture tool the check needs is present but breaks the fixture contract;
  the kit cannot judge the SEP through it (exit 2).

Levels: MUST failures (and MUSTs blocked by a failure) fail the run; SHOULD and MAY failures are
reported and counted, never fatal; INFO results are differences the SEP allows.

A run is *incomplete* when a MUST check did not run though something would run it (a skip or
a block with `enable`): the last line never says `conformant` then, and names what would run
them; `require_all` makes an incomplete run fail. Only what the transport allows is counted: a
check that cannot apply to the target (no `enable`) never makes a run incomplete.

Exit codes, as the official MCP conformance suite's users expect them: 0 when every MUST check
passed or failed as the baseline expects; 1 when a MUST check failed unexpectedly or a baseline
entry is stale (it passed: remove it, so the baseline can only shrink), or the run is incomplete
under `require_all`; 2 when a fixture broke its contract (or, the runner's, when the target
cannot be reached).

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

__all__ = ["LEVELS", "STATUSES", "Baseline", "BaselineError", "Level", "Report", "Result", "Status"]

Level = Literal["MUST", "SHOULD", "MAY", "INFO"]
Status = Literal["pass", "note", "fail", "blocked", "skip", "fixture-error"]
STATUSES: tuple[Status, ...] = ("pass", "note", "fail", "blocked", "skip", "fixture-error")
LEVELS: tuple[Level, ...] = ("MUST", "SHOULD", "MAY", "INFO")
SHOWN_EXCHANGES = 4  # the last exchanges a failure line shows: what was sent, what came back


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

    @property
    def failed(self) -> bool:
        """A failure at its level: `fail`, or blocked by a failed check (a block that names no
        check and nothing that would run it counts as failed too: never a silent pass)."""
        return self.status == "fail" or (
            self.status == "blocked" and (self.blocked_by is not None or self.enable is None)
        )

    @property
    def not_run(self) -> bool:
        """Did not run though something would run it (an option, a fixture): the run is
        incomplete while a MUST check is like this."""
        return self.status in ("skip", "blocked") and not self.failed and self.enable is not None

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
        if self.status in ("skip", "blocked") and self.enable is not None:
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
    """Every result of one run, and what they add up to (`notes`: facts about the run as a
    whole, such as a fixture answering an older field name)."""

    target: str
    eras: Sequence[str]
    results: list[Result] = field(default_factory=list)
    baseline: Baseline = field(default_factory=Baseline)
    require_all: bool = False
    notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def failed_ids(self) -> set[str]:
        return {r.id for r in self.results if r.failed}

    def unexpected(self) -> list[str]:
        """MUST checks that failed or were blocked by a failure and are not in the baseline
        (each id once, in run order)."""
        seen: list[str] = []
        for r in self.results:
            if (
                r.failed
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
            if r.not_run and r.level == "MUST" and r.id not in seen:
                seen.append(r.id)
        return seen

    def enablers(self) -> list[str]:
        """What would run the MUST checks that did not run (options, fixtures), each once."""
        out: list[str] = []
        for r in self.results:
            if r.not_run and r.level == "MUST" and r.enable not in out:
                out.append(str(r.enable))
        return out

    def not_applicable_must(self) -> list[str]:
        """MUST checks that cannot apply to this target, or that a choice the SEP allows left
        nothing to check (a skip nothing would run): never counted as not run."""
        seen: list[str] = []
        for r in self.results:
            if r.status == "skip" and r.enable is None and r.level == "MUST" and r.id not in seen:
                seen.append(r.id)
        return seen

    def fixture_errors(self) -> list[str]:
        return sorted({r.id for r in self.results if r.status == "fixture-error"})

    def incomplete(self) -> bool:
        return bool(self.skipped_must() or self.fixture_errors())

    def exit_code(self) -> int:
        if self.fixture_errors():
            return 2
        if self.unexpected() or self.stale():
            return 1
        return 1 if self.require_all and self.skipped_must() else 0

    def counts(self) -> dict[str, dict[str, int]]:
        """Results per level and status, every cell present (zeros included)."""
        table: dict[str, dict[str, int]] = {level: dict.fromkeys(STATUSES, 0) for level in LEVELS}
        for r in self.results:
            table[r.level][r.status] += 1
        return table

    def summary(self) -> dict[str, Any]:
        count = {s: sum(1 for r in self.results if r.status == s) for s in STATUSES}
        failed_by_level = {
            level: sorted({r.id for r in self.results if r.failed and r.level == level})
            for level in LEVELS
        }
        return {
            "eras": list(self.eras),
            "total": len(self.results),
            "passed": count["pass"] + count["note"],
            "noted": count["note"],
            "failed": count["fail"],
            "skipped": count["skip"],
            "blocked": count["blocked"],
            "fixture_errors": count["fixture-error"],
            "by_level": self.counts(),
            "failed_must": failed_by_level["MUST"],
            "failed_should": failed_by_level["SHOULD"],
            "failed_may": failed_by_level["MAY"],
            "failed_info": failed_by_level["INFO"],
            "unexpected_failures": self.unexpected(),
            "expected_failures": self.expected(),
            "stale_baseline": self.stale(),
            "skipped_must": self.skipped_must(),
            "skipped_must_enable": self.enablers(),
            "not_applicable_must": self.not_applicable_must(),
            "fixture_error_checks": self.fixture_errors(),
            "incomplete": self.incomplete(),
            "notes": list(self.notes),
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
        """One line per check (naming the spec section; a failure adds what was sent, what came
        back and the sentence it breaks), then the summary: what a CI log shows."""
        out: list[str] = []
        for r in self.results:
            mark = r.status.upper()
            if r.failed and self.baseline.covers(r.id):
                mark = "XFAIL"
            detail = r.detail
            if r.status == "blocked" and r.blocked_by:
                detail = f"blocked by {r.blocked_by}: {detail}"
            out.append(f"{mark:<7} {r.level:<6} {r.id} [{r.era}] {r.section}: {detail}")
            if r.status in ("fail", "fixture-error"):
                out.extend(_shown(r))
        s = self.summary()
        out.append(
            f"{s['total']} checks in {', '.join(self.eras) or 'no era'}: {s['passed']} passed "
            f"({s['noted']} with a note), {s['failed']} failed, {s['blocked']} blocked, "
            f"{s['skipped']} skipped, {s['fixture_errors']} fixture errors"
        )
        levels = []
        for level, row in s["by_level"].items():
            cells = [f"{n} {status}" for status, n in row.items() if n]
            if cells:
                levels.append(f"{level} {', '.join(cells)}")
        if levels:
            out.append("by level: " + "; ".join(levels))
        for text in self.notes:
            out.append(f"note: {text}")
        if s["fixture_error_checks"]:
            out.append(
                "fixture errors (a fixture tool breaks the contract; no SEP verdict through it): "
                + ", ".join(s["fixture_error_checks"])
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
        if s["not_applicable_must"]:
            out.append(
                "MUST checks that cannot apply here (not counted as not run): "
                + ", ".join(s["not_applicable_must"])
            )
        skipped = s["skipped_must"]
        if skipped:
            out.append(
                f"{len(skipped)} MUST check{'s' if len(skipped) != 1 else ''} did not run: "
                f"{', '.join(skipped)} (to run them: {'; '.join(s['skipped_must_enable'])})"
                + (" -- --require-all makes this fail the run" if not self.require_all else "")
            )
        if s["exit_code"] == 2:
            out.append("not judged: fix the fixture tools first")
        elif s["exit_code"] != 0:
            out.append("not conformant")
        elif skipped:
            out.append(f"incomplete: every MUST check that ran passed, {len(skipped)} did not run")
        else:
            out.append("conformant")
        return out


_SHOWN_CHARS = 240


def _clip(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _shown(r: Result) -> list[str]:
    """Under a failure: the scenario's last exchanges (what was sent, what came back) and the
    sentence it breaks; the JSON report has every exchange."""
    out: list[str] = []
    exchanges = [e for e in r.evidence if "request" in e]
    if len(exchanges) > SHOWN_EXCHANGES:
        out.append(f"    ... {len(exchanges) - SHOWN_EXCHANGES} earlier exchanges in --json")
    for e in exchanges[-SHOWN_EXCHANGES:]:
        answer = e.get("answer")
        got = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
        out.append(f"    sent: {_clip(str(e['request']))}")
        out.append(f"    got:  {_clip(got)}")
    if r.text:
        out.append(f"    rule: {r.text}")
    return out
