"""The package touches no private runtime internals of asyncio or anyio.

Private state changes shape between Python and anyio releases without notice: code that reads
it breaks a user's server on their next upgrade, with no warning from any type checker. The
one place idemtools leans on another project's internals on purpose is the SDK adapters, and
there each internal is named in an `Internal(...)` declaration that `install()` probes, so a
changed SDK fails loudly at start-up. A name below may appear in `idemtools/server/adapters/` only
inside such a declaration; anywhere else in the package it fails this test.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import idemtools

PACKAGE = Path(idemtools.__file__).parent
ADAPTERS = PACKAGE / "server" / "adapters"

FORBIDDEN = (
    "_enter_task",
    "_leave_task",
    "_current_tasks",
    "_get_running_loop",
    "_task_states",
    "_cancel_called",
    "_parent_scope",
    "_log_destroy_pending",
    "_asyncio_future_blocking",
)
_PATTERN = re.compile(r"\b(" + "|".join(map(re.escape, FORBIDDEN)) + r")\b")


def declared_internals(source: str) -> list[str]:
    """The names of the SDK internals a module declares (`Internal("name", probe)`)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Internal"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.append(node.args[0].value)
    return names


def hits(path: Path, text: str) -> list[str]:
    """`path:line: name` for each forbidden name in `text` not excused as a named, probed
    SDK internal."""
    excused: set[str] = set()
    if path.is_relative_to(ADAPTERS) and path.suffix == ".py":
        for declared in declared_internals(text):
            excused.update(_PATTERN.findall(declared))
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name in _PATTERN.findall(line):
            if name not in excused:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {name}")
    return found


def test_no_private_runtime_internals_in_the_package() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # not text: no source to read
        found.extend(hits(path, text))
    assert not found, "private runtime internals named in the package:\n" + "\n".join(found)


def test_the_scan_finds_each_name_and_excuses_only_a_declared_sdk_internal() -> None:
    # The scan itself, so that the test above can never pass by finding nothing.
    elsewhere = PACKAGE / "engine" / "example.py"
    for name in FORBIDDEN:
        assert hits(elsewhere, f"x = asyncio.tasks.{name}\n") == [
            f"idemtools/engine/example.py:1: {name}"
        ]
        assert hits(elsewhere, f"x = asyncio.tasks.{name.lstrip('_')}\n") == []
    adapter = ADAPTERS / "sdk_example.py"
    declared = 'Internal("asyncio.tasks._enter_task", probe)\nasyncio.tasks._enter_task\n'
    assert hits(adapter, declared) == []
    undeclared = 'Internal("something else", probe)\nasyncio.tasks._enter_task\n'
    assert hits(adapter, undeclared) == ["idemtools/server/adapters/sdk_example.py:2: _enter_task"]
    # Only the adapters may excuse a name by declaring it.
    assert hits(elsewhere, declared) == [
        "idemtools/engine/example.py:1: _enter_task",
        "idemtools/engine/example.py:2: _enter_task",
    ]
