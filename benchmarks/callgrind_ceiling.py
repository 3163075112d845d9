"""The CI gate on the per-call cost: instructions per `tools/call` under callgrind, checked
against the ceilings committed in `callgrind-ceiling.json`.

    python benchmarks/callgrind_ceiling.py            # measure, compare, exit 1 over a ceiling
    python benchmarks/callgrind_ceiling.py --record   # measure and rewrite the ceilings

Runs `bench_mcp_callgrind.py` under valgrind (a bare server; with idemtools on MemoryStore a
keyed first execution, a replay and an unkeyed call, each in its own block of calls) and
divides each block's instruction total by its calls. Instruction counts, unlike times, do not
depend on what else the machine runs, but they do depend on the interpreter and on every
library in the round trip: the ceilings hold for the interpreter and the pinned packages they
were recorded with (`constraints-callgrind.txt`), and the gate refuses to judge anything else
(or to record from it): another Python or mcp, or any installed distribution that file does not
pin at the version installed.
A ceiling is what was measured plus `margin`, so a change that makes a call a few percent
dearer fails here and has to say why (or record new ceilings, in the same change).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
CEILINGS = HERE / "callgrind-ceiling.json"
GATED = ("first", "replay", "unkeyed")
CONSTRAINTS = HERE / "constraints-callgrind.txt"
NOT_PINNED = {
    "idemtools": "the code being measured",
    "pip": "what `python -m venv` seeds; never imported by the round trip",
}
"""Installed distributions the constraints file need not pin, and why."""


def measure(calls: int, warmup: int) -> dict[str, int]:
    """Instructions per call of each kind (bare included), from one valgrind run."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONHASHSEED": "0"}  # dict and set layouts as on every run
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}/cg.%p",
                sys.executable,
                str(HERE / "bench_mcp_callgrind.py"),
                f"--calls={calls}",
                f"--warmup={warmup}",
            ],
            check=True,
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        counts: dict[str, int] = {}
        for dump in Path(out).glob("cg.*.*"):  # one per `callgrind_control -d <kind>`
            text = dump.read_text()
            kind = re.search(r"^desc: Trigger: .*dump (\w+)", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if kind and total:
                counts[kind.group(1)] = round(int(total.group(1)) / calls)
    missing = {"bare", *GATED} - counts.keys()
    if missing:
        raise SystemExit(f"callgrind produced no count for {sorted(missing)}")
    return counts


def normalized(name: str) -> str:
    """A distribution's name as package indexes compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(text: str) -> dict[str, str]:
    """The `name==version` lines of a constraints file, by normalized name."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise SystemExit(f"{CONSTRAINTS.name}: not an exact pin: {raw!r}")
        found[normalized(name.strip())] = version.strip()
    return found


def installed() -> dict[str, str]:
    """Every distribution this interpreter sees, by normalized name, with its version."""
    return {
        normalized(dist.metadata["Name"]): dist.version
        for dist in importlib.metadata.distributions()
    }


def unpinned(have: Mapping[str, str], pinned: Mapping[str, str]) -> list[str]:
    """Installed distributions not pinned at their installed version (`NOT_PINNED` aside)."""
    bad = []
    for name, version in sorted(have.items()):
        if name in NOT_PINNED:
            continue
        want = pinned.get(name)
        if want is None:
            bad.append(f"{name}=={version} (not pinned)")
        elif want != version:
            bad.append(f"{name}=={version} (pinned: {want})")
    return bad


def environment() -> dict[str, str]:
    """What the counts depend on, besides idemtools itself."""
    return {"python": platform.python_version(), "mcp": importlib.metadata.version("mcp")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="rewrite the ceilings")
    parser.add_argument("--margin", type=float, default=0.03, help="with --record")
    args = parser.parse_args()
    saved = json.loads(CEILINGS.read_text())
    here = environment()
    if not args.record and here != saved["environment"]:
        print(f"ceilings recorded on {saved['environment']}, this is {here}: not comparable")
        return 2
    loose = unpinned(installed(), pins(CONSTRAINTS.read_text(encoding="utf-8")))
    if loose:
        print(
            f"installed but not pinned in {CONSTRAINTS.name} (the counts depend on every "
            "package in the round trip; install with -c that file, or pin them there):\n  "
            + "\n  ".join(loose)
        )
        return 2
    counts = measure(saved["calls"], saved["warmup"])
    bare = counts["bare"]
    if args.record:
        saved["environment"] = here
        saved["margin"] = args.margin
        saved["measured"] = counts
        saved["ceilings"] = {k: round(counts[k] * (1 + args.margin)) for k in GATED}
        CEILINGS.write_text(json.dumps(saved, indent=2) + "\n")
    over = []
    print(f"{'call':<10}{'instructions':>14}{'x bare':>9}{'ceiling':>14}")
    for kind in ("bare", *GATED):
        ceiling = saved["ceilings"].get(kind)
        print(
            f"{kind:<10}{counts[kind]:>14,}{counts[kind] / bare:>9.3f}"
            f"{'' if ceiling is None else f'{ceiling:,}':>14}"
        )
        if ceiling is not None and counts[kind] > ceiling:
            over.append(kind)
    if over:
        print(f"over the ceiling: {', '.join(over)} (see benchmarks/callgrind_ceiling.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
