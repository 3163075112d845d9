"""The engine's counters, `EngineStats`: plain integers an operator can export.

A leaf of its own: the steps that count (`store_calls`, `observers`, `execution`, `lapse`) name
the type without importing `core`, which imports every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EngineStats"]


@dataclass
class EngineStats:
    """Counters an operator can export; plain ints, no metrics library imposed."""

    executions: int = 0
    replays: int = 0
    conflicts: int = 0
    in_progress: int = 0
    refusals: int = 0
    store_errors: int = 0
    record_failures: int = 0
    lost_claims: int = 0
    released: int = 0
    lease_lapses: int = 0  # renewals or completions later than the lease allowed (ERROR logged)
    max_runtime_exceeded: int = 0  # calls past max_runtime, answered outcome unknown from then
    lapsed_claims: int = 0  # lapsed claims found by a retry (an end never recorded), any on_lapse
    lapsed_reruns: int = 0  # of those, run again (on_lapse="rerun", ERROR logged)
