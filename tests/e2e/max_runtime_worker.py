"""A process running one keyed call on an Engine over a shared Redis, for the max_runtime test.

    python -m tests.e2e.max_runtime_worker REDIS_URL LEDGER GO KEY

The tool appends a line to LEDGER (its side effect), then waits until the file GO exists, and
returns "run <pid>"; the process prints the call's answer as JSON and exits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from idemtools import Engine, Outcome, Registry
from idemtools.engine import ToolCall
from idemtools.stores import from_url

from .test_max_runtime_processes import policy


async def main(url: str, ledger: str, go: str, key: str) -> None:
    engine = Engine(from_url(url), registry=Registry())

    async def tool() -> Outcome:
        with open(ledger, "a") as f:  # noqa: ASYNC230 - a local file, before the wait
            f.write(f"{os.getpid()}\n")
        while not Path(go).exists():  # noqa: ASYNC240
            await anyio.sleep(0.02)
        return Outcome.of_value(f"run {os.getpid()}")

    outcome = await engine.handle(
        ToolCall(name="export", arguments={}, key=key, policy=policy()), tool
    )
    await engine.aclose()
    print(json.dumps({"result": outcome.result, "error": outcome.error}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])  # type: ignore[arg-type]  # four strings
