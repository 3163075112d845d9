"""The callgrind gate judges only an environment its constraints file pins completely.

`benchmarks/callgrind_ceiling.py` refuses to run (or to record) when any installed distribution
is not pinned there at the version installed: that check, made in the gate's own venv, covers
everything the install pulled in, however deep. Here, in any venv: the check itself, and the
first place a new runtime dependency would be missed, `pyproject.toml`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

pytestmark = pytest.mark.sdk_free

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gate() -> Iterator[Any]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import callgrind_ceiling

        yield callgrind_ceiling
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_an_unpinned_or_other_version_is_refused(gate: Any) -> None:
    pinned = gate.pins("# a comment\nPyJWT==2.15.1\ntyping_extensions==4.16.0  # why\n\n")
    assert pinned == {"pyjwt": "2.15.1", "typing-extensions": "4.16.0"}
    have = {
        "pyjwt": "2.15.1",
        "typing-extensions": "4.15.0",
        "platformdirs": "4.14.9",
        "idemtools": "0.1.0",
        "pip": "25.0",
    }
    assert gate.unpinned(have, pinned) == [
        "platformdirs==4.14.9 (not pinned)",
        "typing-extensions==4.15.0 (pinned: 4.16.0)",
    ]
    with pytest.raises(SystemExit, match="not an exact pin"):
        gate.pins("mcp>=2\n")


def test_every_runtime_dependency_is_pinned_for_the_gates_python(gate: Any) -> None:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    project = tomllib.loads((BENCHMARKS.parent / "pyproject.toml").read_text(encoding="utf-8"))
    python = json.loads((BENCHMARKS / "callgrind-ceiling.json").read_text())["environment"][
        "python"
    ]
    where = {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python}
    pinned = gate.pins(gate.CONSTRAINTS.read_text(encoding="utf-8"))
    missing = []
    for text in project["project"]["dependencies"]:  # the leg installs no extra
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(where):
            name = gate.normalized(req.name)
            if name not in pinned or not req.specifier.contains(pinned[name]):
                missing.append(f"{text} (pinned: {pinned.get(name)})")
    assert not missing, f"pin these in {gate.CONSTRAINTS.name}: {missing}"
