"""Version checks in the package ask for a minimum, never for one exact release.

A check such as `sys.version_info[:2] == (3, 11)`, or a table keyed by minor release, sends a
Python newer than every one CI runs (3.14 cannot be installed on the CI machine) down a slower
or wrong path without a word. `sys.version_info >= (3, 12)` sends it down the newest one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.sdk_free

PACKAGE = Path(__file__).resolve().parents[1] / "idemtools"
ORDERINGS = (ast.GtE, ast.Lt)


def _mentions_version(node: ast.AST) -> bool:
    return any(
        isinstance(sub, ast.Attribute) and sub.attr in ("version_info", "hexversion")
        for sub in ast.walk(node)
    )


def version_checks(source: str) -> list[tuple[int, str]]:
    """(line, text) of each use of `sys.version_info` that is not a `>=` / `<` comparison."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _mentions_version(node):
            if all(isinstance(op, ORDERINGS) for op in node.ops):
                allowed.update(id(sub) for sub in ast.walk(node))
            else:
                found.append((node.lineno, ast.unparse(node)))
                allowed.update(id(sub) for sub in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in allowed or not isinstance(node, (ast.Subscript, ast.Call, ast.Dict)):
            continue
        # A table looked up by version, or one keyed by it.
        keyed = isinstance(node, ast.Subscript) and _mentions_version(node.slice)
        table = isinstance(node, ast.Dict) and any(
            key is not None and _mentions_version(key) for key in node.keys
        )
        if keyed or table:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_every_version_check_in_the_package_is_a_minimum() -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in version_checks(path.read_text(encoding="utf-8"))
    ]
    assert not offending, "exact-release checks (use >= or <):\n" + "\n".join(offending)


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nx = sys.version_info[:2] == (3, 11)",
        "import sys\nx = sys.version_info[:2] != (3, 12)",
        "import sys\nx = sys.version_info[:2] in {(3, 11), (3, 12)}",
        "import sys\nx = {(3, 11): 'a'}[sys.version_info[:2]]",
        "import sys\nx = sys.version_info.minor == 11",
    ],
)
def test_exact_release_checks_are_found(source: str) -> None:
    assert version_checks(source)


@pytest.mark.parametrize(
    "source",
    [
        "import sys\nx = sys.version_info >= (3, 12)",
        "import sys\nx = sys.version_info < (3, 11)",
        "import sys\nx = f'{sys.version_info.major}.{sys.version_info.minor}'",
    ],
)
def test_minimum_checks_and_messages_are_allowed(source: str) -> None:
    assert version_checks(source) == []
