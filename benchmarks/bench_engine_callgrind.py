"""Instructions per keyed first execution of the engine alone (no SDK), whole and with one
part stubbed out at a time, under callgrind: where the engine's own cost is.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=cg.out.%p \
        python benchmarks/bench_engine_callgrind.py [--calls 1000]
    # then, per dump: grep '^desc: Trigger\\|^totals:' cg.out.*.*   (totals / calls)

`Engine.handle` on a MemoryStore without per-scope bounds, with a `run` that returns a fixed
outcome at once; each part as its own dump: `bare` (`run()` alone), `full`, `nofp` (the
fingerprint a constant), `noscope` (the scope a constant), `nostore` (MemoryStore's claim
and complete constant answers), `noprotect` (the body awaited inline, without its task:
unsafe, measured only), `noengine` (`_handle` awaits `run()`). Stubs are measurements,
never configurations.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import idemtools.engine.core as core
from idemtools.engine import Engine, ToolCall
from idemtools.outcome import Outcome
from idemtools.scopes import CallContext
from idemtools.stores.base import Claim
from idemtools.stores.memory import MemoryStore

_RESULT = {"content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}}
_CLAIMED = Claim(claimed=True)


def control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], check=True, capture_output=True)


async def run() -> Outcome:
    return Outcome(result=_RESULT, final=True)


def patched(obj: Any, name: str, value: Any) -> Callable[[], None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    return lambda: setattr(obj, name, old)


async def phase(name: str, calls: int, stub: Callable[[Engine], Callable[[], None]] | None) -> None:
    engine = Engine(MemoryStore(max_records_per_scope=None, max_bytes_per_scope=None))
    context = CallContext(transport="memory", tool="add", arguments={"a": 1, "b": 2})
    todo = [
        ToolCall(name="add", arguments={"a": 1, "b": 2}, key=uuid.uuid4().hex, context=context)
        for _ in range(calls + 50)
    ]
    undo = stub(engine) if stub is not None else None
    for call in todo[:50]:  # warm up
        await engine.handle(call, run)
    control("-i", "on")
    for call in todo[50:]:
        if name == "bare":
            await run()
        else:
            await engine.handle(call, run)
    control("-i", "off")
    control("-d", name)
    if undo is not None:
        undo()


def _no_store(engine: Engine) -> Callable[[], None]:
    async def claim(*_args: Any, **_kwargs: Any) -> Claim:
        return _CLAIMED

    async def complete(*_args: Any, **_kwargs: Any) -> bool:
        return True

    undo = [patched(engine.store, "claim", claim), patched(engine.store, "complete", complete)]

    def undo_all() -> None:
        for each in undo:
            each()

    return undo_all


def _inline(engine: Engine) -> Callable[[], None]:
    async def protect(body: Coroutine[Any, Any, Outcome], _background: Any) -> Outcome:
        return await body

    return patched(core, "protect", protect)


def _no_engine(engine: Engine) -> Callable[[], None]:
    async def direct(_call: ToolCall, body: Callable[[], Any], _obs: Any) -> Outcome:
        return await body()  # type: ignore[no-any-return]

    return patched(engine, "_handle", direct)


STUBS: dict[str, Callable[[Engine], Callable[[], None]] | None] = {
    "bare": None,
    "full": None,
    "nofp": lambda _e: patched(core, "fingerprint_of", lambda _c, _k: "f" * 64),
    "noscope": lambda _e: patched(core, "scope_hash", lambda _p, _c, _k: "a" * 64),
    "nostore": _no_store,
    "noprotect": _inline,
    "noengine": _no_engine,
}


async def main(calls: int) -> None:
    for name, stub in STUBS.items():
        await phase(name, calls, stub)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    asyncio.run(main(parser.parse_args().calls))
