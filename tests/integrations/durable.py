"""What the durable-workflow proofs share: the payments server, worker processes, the ledger."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SERVER = HERE / "durable_server.py"
START_TIMEOUT = 30.0
WORKER_TIMEOUT = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Payments:
    """The server process and the files it shares with a test."""

    url: str
    ledger: Path
    kill: Path
    log: Path

    def charges(self, amount: int) -> int:
        """How many times the tool ran for `amount` (the ledger has one line per execution)."""
        try:
            lines = self.ledger.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return 0
        return sum(json.loads(line)["amount"] == amount for line in lines)

    def env(self) -> dict[str, str]:
        """The environment a worker needs to reach this server."""
        return {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
            "PAYMENTS_URL": self.url,
            "DURABLE_KILL": str(self.kill),
        }


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
        return True
    return False


@contextlib.contextmanager
def payments_server(directory: Path) -> Iterator[Payments]:
    """durable_server.py on a free port with a SQLite store file; stopped (by pid) afterwards."""
    port = _free_port()
    payments = Payments(
        url=f"http://127.0.0.1:{port}/mcp",
        ledger=directory / "ledger.jsonl",
        kill=directory / "kill.pid",
        log=directory / "server.log",
    )
    env = {
        **payments.env(),
        "DURABLE_LEDGER": str(payments.ledger),
        "IDEMTOOLS_STORE": f"sqlite:///{directory / 'idempotency.db'}",
    }
    with payments.log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), str(port)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{payments.log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield payments
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


def run_worker(script: Path, args: list[str], env: dict[str, str], log: Path) -> Finished:
    """Run a worker process to its end (or its death): bounded by WORKER_TIMEOUT."""
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WORKER_TIMEOUT,
        check=False,
    )
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {script.name} {' '.join(args)} -> {proc.returncode}\n{proc.stderr}\n")
    return Finished(proc.returncode, proc.stdout, proc.stderr)


def results_of(finished: Finished) -> list[str]:
    """The workflow results a worker printed (its last line, a JSON list)."""
    assert finished.returncode == 0, finished.stderr[-3000:]
    return [str(r) for r in json.loads(finished.stdout.strip().splitlines()[-1])]
