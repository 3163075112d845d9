"""Soak with SIGKILL: 100 keyed calls over stdio server processes the host ends at random
points — stdin closed, SIGTERM or SIGKILL — with `on_lapse="refuse"` (SQLiteStore, 0.5 s
leases).

Bounded (under a minute): three host slots side by side, each owning a third of the keys,
start a `lapse_server.py` process, send all their pending keys in random order (each tool awaits a
random 0.1–1.5 s after its side effect), and end the process after a random delay. A key is done
once the host got a definite answer: a result, or `idempotency_outcome_unknown` (a process was
killed inside its tool, or between its claim and the tool). Other answers (in progress, shutting
down, no answer) send the key to the slot's next process.

What must hold: no key executed twice across all processes (the servers' ledger); every key
done; and one lease after the last kill a fresh process answers every key with the same
definite answer — none `idempotency_key_in_progress`, nothing run again. The seed is printed
(IDEMTOOLS_LAPSE_SOAK_SEED replays a run).
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from .boundaries import StdioServer, error_type, text
from .test_lapsed_crash import LEASE, LapseBox, params

pytestmark = [pytest.mark.once, pytest.mark.slow, pytest.mark.timeout(120)]

KEYS = 100
SLOTS = 3
TOOL = (0.1, 1.5)
END_AFTER = (0.1, 0.9)
DEADLINE = 45.0
UNKNOWN = "idempotency_outcome_unknown"


def _definite(reply: dict[str, Any] | None) -> bool:
    return reply is not None and ("result" in reply or error_type(reply) == UNKNOWN)


class Slot:
    """One host restarting its server over and over; owns a share of the keys."""

    def __init__(
        self, box: LapseBox, keys: list[str], seconds: dict[str, float], rng: random.Random
    ) -> None:
        self.box, self.pending, self.seconds, self.rng = box, list(keys), seconds, rng
        self.answers: dict[str, dict[str, Any]] = {}  # key -> the first definite answer
        self.ends: Counter[str] = Counter()
        self.processes = 0
        self.last_kill = 0.0
        self.failure: BaseException | None = None

    def run(self, deadline: float) -> None:
        try:
            while self.pending and time.monotonic() < deadline:
                self._one_process()
        except BaseException as exc:  # reported by the test, with the seed
            self.failure = exc

    def _one_process(self) -> None:
        server = StdioServer(self.box)
        self.processes += 1
        try:
            batch = list(self.pending)  # every pending key: a few processes settle them all
            self.rng.shuffle(batch)
            sent = {
                server.start("tools/call", params("charge_refuse", key, self.seconds[key])): key
                for key in batch
            }
            server.collect(self.rng.uniform(*END_AFTER))
            how = self.rng.choice(["eof", "sigterm", "sigkill", "sigkill"])
            self.ends[how] += 1
            if how == "eof":
                server.close_stdin()
            elif how == "sigterm":
                server.signal(signal.SIGTERM)
            else:
                server.signal(signal.SIGKILL)
                self.last_kill = time.monotonic()
            while server.collect(1.0):
                pass
            server.exited_within(15.0)
        finally:
            server.stop()
        for rid, key in sent.items():
            reply = server.replies.get(rid)
            if _definite(reply):
                assert reply is not None
                self.answers.setdefault(key, reply)
                self.pending.remove(key)


def _answer(reply: dict[str, Any]) -> str:
    return text(reply) if "result" in reply else str(error_type(reply))


def test_sigkill_soak_no_key_twice_and_every_key_definite(tmp_path: Path) -> None:
    seed = int(os.environ.get("IDEMTOOLS_LAPSE_SOAK_SEED") or random.randrange(2**32))
    print(f"lapse soak seed {seed} (IDEMTOOLS_LAPSE_SOAK_SEED={seed} replays this run)")
    rng = random.Random(seed)
    box = LapseBox(tmp_path, f"sqlite:///{tmp_path / 'records.db'}")
    keys = [f"k{n:03d}" for n in range(KEYS)]
    seconds = {key: round(rng.uniform(*TOOL), 3) for key in keys}
    slots = [
        Slot(box, keys[n::SLOTS], seconds, random.Random(rng.randrange(2**32)))
        for n in range(SLOTS)
    ]
    began = time.monotonic()
    threads = [
        threading.Thread(target=slot.run, args=(began + DEADLINE,), daemon=True) for slot in slots
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(DEADLINE + 30)
    took = time.monotonic() - began
    where = f"seed {seed}"
    for slot in slots:
        assert slot.failure is None, (where, slot.failure)
    pending = [key for slot in slots for key in slot.pending]
    processes = sum(slot.processes for slot in slots)
    assert not pending, (where, f"no definite answer in {DEADLINE} s, {processes} processes")

    executed = box.executed()
    twice = {key: n for key, n in executed.items() if n > 1}
    assert not twice, (where, "executed more than once", twice)

    # One lease after the last kill, a fresh process: every key has its definite answer.
    last_kill = max(slot.last_kill for slot in slots)
    time.sleep(max(0.0, last_kill + LEASE - time.monotonic()))
    answers = {key: reply for slot in slots for key, reply in slot.answers.items()}
    verifier = StdioServer(box)
    try:
        replies = {
            key: verifier.request("tools/call", params("charge_refuse", key, seconds[key]))
            for key in keys
        }
    finally:
        verifier.stop()
    for key, reply in replies.items():
        assert _definite(reply), (where, key, reply)
        assert _answer(reply) == _answer(answers[key]), (where, key, reply, answers[key])
    assert box.executed() == executed, (where, "the verifying pass ran something")

    ends: Counter[str] = sum((slot.ends for slot in slots), Counter())
    unknown = sum(1 for reply in replies.values() if "result" not in reply)
    print(
        f"lapse soak: {KEYS} keys, {processes} processes ended by {dict(ends)}, "
        f"{unknown} keys answered outcome unknown, {took:.1f} s"
    )
    assert ends["sigkill"], (where, "no process was SIGKILLed")
