"""The kit's own mutant suite: the reference server passes; every bug switched on in it is caught.

`reference_server.py` is an SEP-3182 server written from the SEP text without idemtools;
`mutants.py` lists one bug per blind spot the kit once had and per check family, each with the check
id that must fail. Each run is `idemtools conformance --json FILE` as a subprocess, judged by
the JSON report (a SHOULD failure exits 0, so the exit code cannot say). A mutant whose check
the kit does not have yet (`CHECKS`) is skipped with that reason; once the check exists the
mutant is required, and one surviving mutant fails the suite (the kill rate must be 100 %).

Runs are shared by the tests (one kit run per mutant, two at a time: the machine has two
cores), started when the first test asks and in the order the tests were collected.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from idemtools.conformance.checks import CHECKS

from . import mutants as catalogue
from . import reference_server
from .kit import HERE, PY, ROOT, free_port

pytestmark = [pytest.mark.sdk_free, pytest.mark.slow]

SERVER = HERE / "reference_server.py"
SLOW_MS = "800"  # the in-progress original: long enough on a loaded two-core machine
RETENTION = "4"  # documented and kept by retention runs; the kit waits half of it
ALICE, BOB = "Authorization: Bearer alice", "Authorization: Bearer bob"
WORKERS = 2


@dataclass(frozen=True)
class Plan:
    """One kit run against the reference server."""

    name: str
    mutant: str | None = None
    eras: tuple[str, ...] = catalogue.BOTH
    http: bool = False
    retention: bool = False


REFERENCE_PLANS = (
    Plan("reference-stdio", retention=True),
    Plan("reference-http", http=True),
)
VARIANT_PLANS = tuple(
    Plan(f"variant-{v.name}", v.name, retention=v.retention) for v in catalogue.VARIANTS
)
MUTANT_PLANS = {
    m.name: Plan(f"mutant-{m.name}", m.name, m.eras, m.http, m.retention) for m in catalogue.MUTANTS
}
ALL_PLANS = {p.name: p for p in (*REFERENCE_PLANS, *VARIANT_PLANS, *MUTANT_PLANS.values())}


@dataclass
class Run:
    plan: Plan
    code: int
    report: dict[str, Any]
    out: str
    seconds: float

    def results(self, check_id: str) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks", []) if c["id"] == check_id]

    def failed(self, levels: tuple[str, ...] | None = None) -> set[str]:
        return {
            c["id"]
            for c in self.report.get("checks", [])
            if c["status"] in ("fail", "blocked") and (levels is None or c["level"] in levels)
        }

    def caught(self, check_id: str) -> bool:
        """The check reported the bug: `fail` (for an INFO check, any status that is not a
        pass, a skip or a block: the report model names that one)."""
        return any(
            c["status"] == "fail"
            or (c["level"] == "INFO" and c["status"] not in ("pass", "skip", "blocked"))
            for c in self.results(check_id)
        )

    def why(self) -> str:
        return f"exit {self.code} after {self.seconds:.1f} s:\n{self.out[-4000:]}"


@contextlib.contextmanager
def _http_instance(port: int, args: list[str], log: Any) -> Iterator[str]:
    proc = subprocess.Popen(
        [PY, str(SERVER), "--http", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the reference server on port {port} did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def execute(plan: Plan) -> Run:
    """The kit against the reference server with `plan`'s bug: a real subprocess each."""
    server_args = ["--mutant", plan.mutant] if plan.mutant else []
    kit_args = ["--slow-ms", SLOW_MS, "--timeout", "20"]
    if len(plan.eras) == 1:
        kit_args += ["--era", plan.eras[0]]
    if plan.retention:
        server_args += ["--retention", RETENTION]
        kit_args += ["--retention", RETENTION]
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "servers.log", "w+b") as log:
        report_path = Path(tmp) / "report.json"
        with contextlib.ExitStack() as stack:
            if plan.http:
                shared = ["--store", str(Path(tmp) / "records.db"), *server_args]
                one = stack.enter_context(_http_instance(free_port(), shared, log))
                two = stack.enter_context(_http_instance(free_port(), shared, log))
                target = ["--header", ALICE, "--second-header", BOB, "--also", two, one]
            else:
                target = ["--", PY, str(SERVER), *server_args]
            command = [PY, "-m", "idemtools.cli", "conformance", "--json", str(report_path)]
            done = subprocess.run(
                [*command, *kit_args, *target],
                cwd=ROOT,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                capture_output=True,
                text=True,
                timeout=150,
            )
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
        log.seek(0)
        server_err = log.read().decode(errors="replace")[-2000:]
    out = done.stdout + done.stderr + (f"\n[servers' stderr]\n{server_err}" if server_err else "")
    return Run(plan, done.returncode, report, out, time.monotonic() - start)


@dataclass
class Runs:
    """Every plan the session selected, run once, two at a time, shared by the tests."""

    wanted: list[str]
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(WORKERS))
    futures: dict[str, Future[Run]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _submit(self, name: str) -> Future[Run]:
        with self.lock:
            if name not in self.futures:
                self.futures[name] = self.pool.submit(execute, ALL_PLANS[name])
            return self.futures[name]

    def get(self, name: str) -> Run:
        for other in self.wanted:  # queue everything selected, in collection order
            self._submit(other)
        return self._submit(name).result()


def pending(mutant: catalogue.Mutant) -> list[str]:
    """The expected ids the kit does not have yet (new checks, added in parallel)."""
    return [i for i in mutant.expect if i not in CHECKS]


_by_name = {m.name: m for m in catalogue.MUTANTS}


def _selected(session: pytest.Session) -> list[str]:
    """The plans the selected tests of this module need, in collection order."""
    required = [f"mutant-{m.name}" for m in catalogue.MUTANTS if not pending(m)]
    wanted: list[str] = []
    for item in session.items:
        if not isinstance(item, pytest.Function) or item.module is None:
            continue
        if item.module.__name__ != __name__:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        names: list[str] = {
            "test_reference_passes": [str(params.get("plan"))],
            "test_reference_exercises_every_check": [p.name for p in REFERENCE_PLANS],
            "test_mutant_is_caught": [f"mutant-{params.get('mutant')}"],
            "test_kill_rate_is_100_percent": required,
        }.get(item.originalname, [])
        wanted += [n for n in names if n in ALL_PLANS and n not in wanted]
    return [n for n in wanted if not n.startswith("mutant-") or n in required]


@pytest.fixture(scope="session")
def runs(request: pytest.FixtureRequest) -> Iterator[Runs]:
    shared = Runs(_selected(request.session))
    yield shared
    shared.pool.shutdown(wait=True, cancel_futures=True)


# -- the catalogue itself ------------------------------------------------------------------------


def test_catalogue_names_the_reference_servers_switches() -> None:
    names = [m.name for m in catalogue.MUTANTS] + [v.name for v in catalogue.VARIANTS]
    assert len(names) == len(set(names))
    assert set(names) == reference_server.MUTANTS


def test_every_blind_spot_and_family_has_a_mutant() -> None:
    origins = {m.origin for m in catalogue.MUTANTS}
    assert set(catalogue.BLIND_SPOTS) | set(catalogue.FAMILIES) == origins


def test_expected_ids_are_real_check_ids() -> None:
    """A typo would skip a mutant forever: every expected id is a check the kit has or one
    agreed to be added."""
    unknown = {i for m in catalogue.MUTANTS for i in m.expect} - set(CHECKS) - catalogue.NEW_IDS
    assert not unknown


def test_reference_server_uses_neither_idemtools_nor_an_sdk() -> None:
    import ast

    tree = ast.parse(SERVER.read_text())
    imported = {
        ((node.module or "") if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if not (isinstance(node, ast.ImportFrom) and node.level)
    }
    assert not imported & {"idemtools", "mcp", "mcp_types", "fastmcp", "tests"}
    assert imported <= {*__import__("sys").stdlib_module_names, "uvicorn"}


@pytest.mark.parametrize(
    ("level", "status", "caught"),
    [
        ("MUST", "fail", True),
        ("SHOULD", "fail", True),
        ("MUST", "blocked", False),  # blocked by another failure: this check did not decide
        ("MUST", "skip", False),
        ("MUST", "pass", False),
        ("INFO", "fail", True),
        ("INFO", "differs", True),  # whatever the report model calls an INFO finding
        ("INFO", "pass", False),
        ("INFO", "skip", False),
    ],
)
def test_a_mutant_is_caught_only_by_its_own_checks_verdict(
    level: str, status: str, caught: bool
) -> None:
    check = {"id": "sep-3182-x", "level": level, "status": status, "era": catalogue.MODERN}
    other = {**check, "id": "sep-3182-y", "status": "fail"}
    run = Run(Plan("p"), 0, {"checks": [other, check]}, "", 0.0)
    assert run.caught("sep-3182-x") is caught
    assert run.caught("sep-3182-z") is False  # absent from the report: not caught


# -- the reference passes -------------------------------------------------------------------------


@pytest.mark.parametrize("plan", [p.name for p in (*REFERENCE_PLANS, *VARIANT_PLANS)])
def test_reference_passes(runs: Runs, plan: str) -> None:
    run = runs.get(plan)
    assert run.report, run.why()
    assert run.report["summary"]["eras"] == list(catalogue.BOTH), run.why()
    assert run.failed(("MUST", "SHOULD")) == set(), run.why()
    assert run.code == 0, run.why()


@pytest.mark.timeout(600)
def test_reference_exercises_every_check(runs: Runs) -> None:
    """Every check the kit has passes on the reference somewhere (stdio or HTTP): a check that
    cannot pass on a correct server, or never runs, can kill no mutant."""
    passed = {
        c["id"]
        for plan in REFERENCE_PLANS
        for c in runs.get(plan.name).report.get("checks", [])
        if c["status"] == "pass"
    }
    assert set(CHECKS) - passed == set()


# -- every mutant is caught -----------------------------------------------------------------------


@pytest.mark.parametrize("mutant", [m.name for m in catalogue.MUTANTS])
def test_mutant_is_caught(runs: Runs, mutant: str) -> None:
    m = _by_name[mutant]
    if missing := pending(m):
        pytest.skip(
            f"the kit has no check {', '.join(missing)} yet: this mutant is required once it exists"
        )
    run = runs.get(f"mutant-{mutant}")
    assert run.report, f"{mutant}: no report; {run.why()}"
    survived = [i for i in m.expect if not run.caught(i)]
    assert not survived, f"{mutant} ({m.bug}) was not caught by {survived}; {run.why()}"


@pytest.mark.timeout(900)  # run alone, it waits for every kit run
def test_kill_rate_is_100_percent(runs: Runs) -> None:
    required = [m for m in catalogue.MUTANTS if not pending(m)]
    killed: list[str] = []
    survivors: list[str] = []
    for m in required:
        run = runs.get(f"mutant-{m.name}")
        (killed if all(run.caught(i) for i in m.expect) else survivors).append(m.name)
    rate = len(killed) / len(required) if required else 1.0
    skipped = [m.name for m in catalogue.MUTANTS if pending(m)]
    assert not survivors, (
        f"kill rate {rate:.0%} ({len(killed)}/{len(required)}): survivors {survivors}; "
        f"not yet required (their checks are not in the kit): {skipped}"
    )
    assert rate == 1.0
