"""examples/reconcile_payments.py runs and checks itself: a server SIGKILLed between the
provider's charge and the record, restarted, and the retry reconciled against the provider
(one charge, the retry answered with it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_reconcile_example_charges_once_and_answers_the_retry() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "reconcile_payments.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reconciled: one charge, and the retry was answered with it" in done.stdout
    assert "charges at the provider: 1" in done.stdout
