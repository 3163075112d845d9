"""canonicalize vs rfc8785.dumps, side by side in one run (ratios matter; absolute times are noisy).

Run: python benchmarks/bench_canonical.py
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import rfc8785

from idemtools.canonical import canonicalize


def small_payload() -> dict[str, Any]:
    return {"amount": 4200, "currency": "usd", "customer": "cus_9f2a", "metadata": {"order": 17}}


def large_payload(n: int = 10_000, seed: int = 7, with_nulls: bool = False) -> list[dict[str, Any]]:
    """~750 KB: 10,000 records of ints, floats and strings (the speed goal's payload)."""
    rng = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    records: list[dict[str, Any]] = []
    for i in range(n):
        record: dict[str, Any] = {
            "id": i,
            "name": f"{rng.choice(words)} {rng.choice(words)}",
            "price": round(rng.uniform(0.5, 500.0), 2),
            "qty": rng.randrange(1000),
            "ratio": rng.choice([0.0, 1.0, 2.5, 1e-7, 3.0e21, rng.random()]),
        }
        if with_nulls:
            record["note"] = None
        records.append(record)
    return records


def median_time(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    print(f"{'payload':<28}{'size':>10}{'rfc8785':>12}{'idemtools':>12}{'speed-up':>10}  identical")
    for label, payload, repeat in (
        ("small tool-call arguments", small_payload(), 2000),
        ("10,000 records", large_payload(), 15),
        # `null` sends canonicalize down its exact (stdlib json) path: see idemtools/canonical.py
        ("10,000 records with nulls", large_payload(with_nulls=True), 15),
    ):
        ours = canonicalize(payload)
        ref = rfc8785.dumps(payload)
        t_ref = median_time(lambda p=payload: rfc8785.dumps(p), repeat)  # type: ignore[misc]
        t_ours = median_time(lambda p=payload: canonicalize(p), repeat)  # type: ignore[misc]
        size = len(json.dumps(payload).encode())
        print(
            f"{label:<28}{size:>10,}{t_ref * 1e3:>10.3f}ms{t_ours * 1e3:>10.3f}ms"
            f"{t_ref / t_ours:>9.1f}x  {ours == ref}"
        )


if __name__ == "__main__":
    main()
