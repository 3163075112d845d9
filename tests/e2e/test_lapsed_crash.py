"""SIGKILL a stdio server process inside keyed tools, restart it, retry: `on_lapse` decides.

One server process (`lapse_server.py`) runs five keyed calls at once, each inside its tool —
four after their side effect, one before it — and is SIGKILLed there. After one lease a new
process gets the retries, on every store that outlives a process (SQLite, Redis, Redis Cluster,
PostgreSQL):

- `rerun`: the tool runs once more, and the server logs the lapsed claim at ERROR;
- `refuse`: `idempotency_outcome_unknown`, now and on every later retry; nothing runs;
- a reconcile that finds the effect: its outcome, replayed on the next retry; nothing runs;
- a reconcile that finds nothing (the process died before the effect): the tool runs once;
- a reconcile that raises (the provider's lookup is down): `idempotency_outcome_unknown`, not
  recorded; once the lookup is back, the next retry reconciles again and gets the outcome.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..services import RUN_ID, delete_redis_keys, need_redis
from .boundaries import Box, StdioServer, error_type, text

pytestmark = [pytest.mark.slow]

LEASE = 0.5


class LapseBox(Box):
    """The files of `lapse_server.py` processes sharing one store and one ledger."""

    def __init__(self, where: Path, store_url: str, lease: float = LEASE) -> None:
        super().__init__(where, "sdk")
        self.store_url = store_url
        self.mode = "serve"
        self.lease = lease

    def command(self, runner: str, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.e2e.lapse_server",
            str(self.ledger),
            self.store_url,
            self.mode,
            str(self.lease),
        ]

    def executed(self) -> Counter[str]:
        if not self.ledger.exists():
            return Counter()
        return Counter(line.split(" ")[0] for line in self.ledger.read_text().splitlines())


def params(tool: str, label: str, seconds: float = 0.0) -> dict[str, Any]:
    return {
        "name": tool,
        "arguments": {"label": label, "seconds": seconds},
        "idempotencyKey": f"key-{label}",
    }


@contextlib.contextmanager
def _store(kind: str, request: pytest.FixtureRequest, tmp: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'records.db'}"
    elif kind == "redis":
        prefix = f"idemtools-test:{RUN_ID}:lapse:{uuid.uuid4().hex[:6]}:"
        yield f"{need_redis()}?prefix={prefix}"
        delete_redis_keys(prefix)
    elif kind == "redis-cluster":
        cluster = request.getfixturevalue("redis_cluster")
        yield f"{cluster.url}?prefix=lapse:{uuid.uuid4().hex[:6]}:"
    else:
        from .test_multi_instance import _postgres_store

        with _postgres_store() as (url, _register):
            yield url


CALLS = [
    ("charge_rerun", "rerun"),
    ("charge_refuse", "refuse"),
    ("charge_reconcile", "found"),
    ("charge_reconcile", "before-missing"),
    ("charge_reconcile", "lookup-down"),
]


@pytest.mark.parametrize(
    "kind",
    [
        "sqlite",
        pytest.param("redis", marks=pytest.mark.services),
        pytest.param("redis-cluster", marks=[pytest.mark.services, pytest.mark.cluster]),
        pytest.param("postgres", marks=pytest.mark.services),
    ],
)
def test_sigkill_inside_the_tool_then_the_retry_does_what_on_lapse_says(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    with _store(kind, request, tmp_path) as url:
        box = LapseBox(tmp_path, url)
        box.mode = "hang"
        doomed = StdioServer(box)
        try:
            for tool, label in CALLS:
                doomed.start("tools/call", params(tool, label))
            deadline = time.monotonic() + 20
            while set(box.executed()) != {"rerun", "refuse", "found", "lookup-down"}:
                assert time.monotonic() < deadline, (box.executed(), box.logs())
                time.sleep(0.02)
            time.sleep(0.1)  # "before-missing" is inside its tool too (it awaits before the effect)
            doomed.signal(signal.SIGKILL)
            doomed.exited_within(10)
        finally:
            doomed.stop()
        time.sleep(LEASE + 0.3)  # every claim of the dead process has lapsed

        box.mode = "serve"
        down = Path(f"{box.ledger}.down-lookup-down")
        down.touch()
        server = StdioServer(box)
        try:
            first = {label: server.request("tools/call", params(t, label)) for t, label in CALLS}
            down.unlink()
            second = {label: server.request("tools/call", params(t, label)) for t, label in CALLS}
        finally:
            server.stop()
        log = server.log.read_text()

    where = (kind, first, second, log)
    assert "charged rerun pid" in text(first["rerun"]), where
    assert "ERROR" in log and "lapsed claim found" in log and "on_lapse=rerun" in log, where
    assert error_type(first["refuse"]) == "idempotency_outcome_unknown", where
    assert error_type(second["refuse"]) == "idempotency_outcome_unknown", where
    assert text(first["found"]) == "charged found (reconciled)", where
    assert text(second["found"]) == text(first["found"]), where
    assert "charged before-missing pid" in text(first["before-missing"]), where
    assert text(second["before-missing"]) == text(first["before-missing"]), where
    assert error_type(first["lookup-down"]) == "idempotency_outcome_unknown", where
    assert text(second["lookup-down"]) == "charged lookup-down (reconciled)", where
    assert box.executed() == Counter(
        {"rerun": 2, "refuse": 1, "found": 1, "before-missing": 1, "lookup-down": 1}
    ), where
