"""Build idemtools' sdist and wheel, check them, and prove the wheel works on its own.

    python scripts/release_check.py                 # build + check into a temporary directory
    python scripts/release_check.py --outdir dist   # keep what was built, ready to upload
    python scripts/release_check.py --outdir dist --upload   # the release: check, then upload

Steps, each one fatal: `python -m build` (the sdist, then the wheel built *from* the sdist, so a
file missing from the sdist breaks the wheel here rather than for users); `twine check --strict`
(the metadata and README render as the package index will show them); the wheel's contents
(package data the conformance kit and type checkers need); a fresh virtual environment with only
the wheel installed (its dependencies from the index, never the checkout); `examples/demo.py` run
from a directory outside the checkout, so `import idemtools` can only find the installed wheel.

Needs the `dev` extra (`build`, `twine`). `--upload` runs `twine upload` with twine's usual
credentials (`TWINE_USERNAME` / `TWINE_PASSWORD`, a token, or keyring) once every check passed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_FILES = ("demo.py", "payments_server.py")
WHEEL_MUST_HOLD = (
    "idemtools/__init__.py",
    "idemtools/py.typed",
    "idemtools/conformance/sep-3182.yaml",
    "idemtools/testing/assertions.py",
    "idemtools/testing/pytest_plugin.py",
)


def run(*command: str | Path, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    print("$", " ".join(str(part) for part in command), flush=True)
    started = time.monotonic()
    done = subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True
    )
    print(f"  ({time.monotonic() - started:.1f} s)", flush=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        raise SystemExit(f"release check FAILED: {command[:2]} exited {done.returncode}")
    return done.stdout


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", type=Path, help="keep the sdist and wheel here")
    parser.add_argument("--upload", action="store_true", help="twine upload once all passed")
    options = parser.parse_args()
    if options.outdir is not None and options.outdir.exists() and any(options.outdir.iterdir()):
        parser.error(f"--outdir {options.outdir} is not empty: only what is built here is checked")

    with tempfile.TemporaryDirectory(prefix="idemtools-release-") as scratch:
        work = Path(scratch)
        dist = options.outdir.resolve() if options.outdir else work / "dist"
        run(sys.executable, "-m", "build", "--outdir", dist, ROOT)
        built = sorted(dist.iterdir())
        wheels = [p for p in built if p.suffix == ".whl"]
        sdists = [p for p in built if p.name.endswith(".tar.gz")]
        if len(wheels) != 1 or len(sdists) != 1:
            raise SystemExit(f"release check FAILED: expected one wheel and one sdist, got {built}")
        run(sys.executable, "-m", "twine", "check", "--strict", *built)

        with zipfile.ZipFile(wheels[0]) as wheel:
            names = set(wheel.namelist())
            entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
            declared = wheel.read(entry_points).decode()
        missing = [name for name in WHEEL_MUST_HOLD if name not in names]
        if missing or "[pytest11]" not in declared or "tests/" in "".join(names):
            raise SystemExit(
                f"release check FAILED: wheel lacks {missing} or its pytest11 entry point, "
                "or ships tests/"
            )

        venv = work / "venv"
        run(sys.executable, "-m", "venv", venv)
        python = venv_python(venv)
        run(python, "-m", "pip", "install", "-q", wheels[0])

        # Outside the checkout, without PYTHONPATH: only the installed wheel can be imported.
        demo = work / "demo"
        demo.mkdir()
        for name in DEMO_FILES:
            shutil.copy(ROOT / "examples" / name, demo / name)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        where = run(python, "-c", "import idemtools; print(idemtools.__file__)", cwd=demo, env=env)
        if not Path(where.strip()).resolve().is_relative_to(venv.resolve()):
            raise SystemExit(f"release check FAILED: idemtools imported from {where.strip()}")
        run(python, "demo.py", cwd=demo, env=env)
        print(f"release check passed: {', '.join(p.name for p in built)}")

        if options.upload:
            run(sys.executable, "-m", "twine", "upload", *built)
    return 0


if __name__ == "__main__":
    sys.exit(main())
