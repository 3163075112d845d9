"""A store whose driver is not installed names the extra to install.

The driver is blocked in a child interpreter (`sys.modules[name] = None` makes its import raise
ModuleNotFoundError exactly as an absent package does), so this runs wherever the drivers are
installed, which is everywhere the suite runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None
try:
    {statement}
except ModuleNotFoundError as exc:
    print(json.dumps({{"type": type(exc).__name__, "message": str(exc), "name": exc.name,
                      "chained": type(exc.__cause__).__name__}}))
else:
    print(json.dumps(None))
"""

DRIVERS = {"redis": {"redis"}, "postgres": {"psycopg", "psycopg_pool"}}

CASES = [
    # (blocked modules, statement, extra)
    (["redis"], "from idemtools.stores import RedisStore", "redis"),
    (["redis"], "import idemtools.stores.redis", "redis"),
    (["redis"], "from idemtools.stores import from_url; from_url('redis://127.0.0.1/0')", "redis"),
    (["psycopg"], "from idemtools.stores import PostgresStore", "postgres"),
    (["psycopg_pool"], "import idemtools.stores.postgres", "postgres"),
    (
        ["psycopg"],
        "from idemtools.stores import from_url; from_url('postgresql://u@127.0.0.1/db')",
        "postgres",
    ),
]


@pytest.mark.parametrize(("blocked", "statement", "extra"), CASES)
def test_missing_driver_names_the_extra(blocked: list[str], statement: str, extra: str) -> None:
    probe = PROBE.format(blocked=blocked, statement=statement)
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen is not None, f"{statement} imported although {blocked} is missing"
    assert seen["type"] == "ModuleNotFoundError"  # catchable as any missing import
    # The blocked module, or another driver module of the extra where that is really absent.
    assert seen["name"] in DRIVERS[extra]
    assert f"pip install 'idemtools[{extra}]'" in seen["message"]
    assert repr(seen["name"]) in seen["message"]
    assert seen["chained"] == "ModuleNotFoundError"


def test_memory_and_sqlite_need_no_extra() -> None:
    probe = PROBE.format(
        blocked=["redis", "psycopg", "psycopg_pool"],
        statement="from idemtools.stores import from_url; from_url('memory://'); "
        "from_url('sqlite:///:memory:')",
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) is None
