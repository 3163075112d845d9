"""The package, docs, examples, tests and tools speak to their readers, not of how they were made.

No reference to this project's own work orders (issue or item numbers, "passes"), branch
names, commit hashes, or a design file outside the repository may appear in a file a user or
a contributor reads: code, comments, docstrings, tests, docs. They mean nothing to the reader
and go stale. The behaviour contract is docs/contract.md. SEP numbers and links to other
projects' public pages (`github.com/owner/repo/issues/N`) are fine.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["idemtools", "docs", "examples", "tests", "benchmarks", "scripts", "README.md",
           "mkdocs.yml"]  # fmt: skip
SUFFIXES = {".py", ".md", ".yml", ".yaml", ".toml", ".mjs", ".js", ".ts", ".json", ".txt", ".cfg"}
SKIPPED_PARTS = {"node_modules", "__pycache__", ".git", "vendor"}  # vendor: third-party, verbatim

# Hex that is data, not a reference to this project's history, each with its reason.
HEX_ALLOWED = {
    "0123456789abcdef",  # the hex alphabet
}

RULES: list[tuple[str, re.Pattern[str]]] = [
    ("a work order", re.compile(r"\b[Ii]ssues? #?\d+")),
    ("a work order's item", re.compile(r"\b[Ii]tems? \d+(?:[.,–-]|\b)")),
    ("a numbered pass", re.compile(r"\b[Pp]ass(?:es)? \d+\b")),
    ("a numbered pass", re.compile(r"\b(?:[Ff]irst|[Ss]econd|[Tt]hird|[Ff]ourth|[Ff]ifth) pass\b")),
    ("a design file outside the repository", re.compile(r"semantics\.md")),
    ("a branch name", re.compile(r"\bi\d+-[a-z]")),
    ("a branch name", re.compile(r"\b[Bb]ranch `")),
]
# A commit hash: 7 to 40 lowercase hex digits, at least one letter and one digit, standing alone.
HASH = re.compile(r"(?<![\w./:#=-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])")


def _files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *SCANNED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        ROOT / name
        for name in listed
        if Path(name).suffix in SUFFIXES
        and not SKIPPED_PARTS & set(Path(name).parts)
        and (ROOT / name).is_file()
    ]


def _hits(path: Path) -> list[str]:
    relative = path.relative_to(ROOT).as_posix()
    if relative == "tests/test_docs_words.py":
        return []  # its own patterns
    hits = []
    text = path.read_text(encoding="utf-8", errors="replace")
    fenced = False  # inside a Markdown code block: example output, where hex is data
    for number, line in enumerate(text.splitlines(), 1):
        if path.suffix == ".md" and line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        for what, pattern in RULES:
            if pattern.search(line):
                hits.append(f"{relative}:{number}: {what}: {line.strip()[:120]}")
        if fenced:
            continue
        if any(m.group() not in HEX_ALLOWED for m in HASH.finditer(line)):
            hits.append(f"{relative}:{number}: a commit hash?: {line.strip()[:120]}")
    return hits


def test_the_scan_sees_the_package_docs_and_tests() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in _files()}
    assert {"idemtools/__init__.py", "docs/contract.md", "README.md", "mkdocs.yml"} <= names
    assert any(name.startswith("tests/") for name in names)


@pytest.mark.parametrize(
    "line",
    [
        "# issue 12: the fast path",
        "(issue 19, B)",
        "Issue 9.1: a client id",
        "item 7's commits",
        "the fourth pass",
        "as semantics.md requires",
        "branch `i18-perf`",
        "before: `a8c1f7a`",
        'BASE = "8eef572"',
        "the commit (8eef572) before",
        "reverted in 8eef572.",
        "git archive 8eef5729c3d947a9b06fc20abdc0fc73f7b41226 idemtools",
    ],
)
def test_the_rules_catch_process_words(line: str) -> None:
    assert any(p.search(line) for _, p in RULES) or HASH.search(line), line


@pytest.mark.parametrize(
    "line",
    [
        "SEP-3182 request idempotency",
        "see https://github.com/modelcontextprotocol/python-sdk/issues/1234",
        "key_digest=sha256:3f2a",
        "retention = 86400",
        "a second call is refused",
        'fingerprint = "5bb990784de182c46398e86d397c796b53146c275166ca466b0983a83174afcc"',
        "the key is `deadbeef` or `cafebabe`",
        "uuid.uuid4().hex[:8]",
    ],
)
def test_the_rules_leave_ordinary_text_alone(line: str) -> None:
    assert not any(p.search(line) for _, p in RULES) and not HASH.search(line), line


def test_no_process_words_anywhere() -> None:
    hits = [hit for path in _files() for hit in _hits(path)]
    assert hits == [], f"{len(hits)} references to work orders, branches or commits:\n" + "\n".join(
        hits
    )
