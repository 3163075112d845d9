"""docs/clients.md's examples end when an answer is lost: they time out and retry, never hang.

Each example (examples/clients/*.py) talks over stdio to examples/payments_server.py behind a
relay that swallows the first `tools/call` answer and keeps the connection open
(drop_first_answer.py): the tool ran, its answer never came. Without a read timeout the example
would wait for ever; with one, it retries under the same key and gets the first execution's
answer (`charge #1`), or its framework does not retry and it fails with a timeout error.

Each example waits 30 s for an answer. Here the one call that sets that wait gets 3 s instead,
through the name the example reads it from (`anyio.fail_after`, `Client(timeout=...)`, ...);
everything else runs as written. An example that sets no wait is caught at once, and one whose
wait never fires is stopped after 20 s and fails.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
RELAY = Path(__file__).with_name("drop_first_answer.py")
SERVER = ROOT / "examples" / "payments_server.py"
WAIT = 30.0  # what each example waits for an answer
SHORT = 3.0  # what it waits here
BOUND = 20.0  # an example still running after this hangs


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        f"lost_answer_example_{name}", ROOT / "examples" / "clients" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _shorten(seconds: Any) -> Any:
    """The example's wait, shortened in its own type (seconds or a timedelta)."""
    if isinstance(seconds, timedelta):
        assert seconds.total_seconds() == WAIT, seconds
        return timedelta(seconds=SHORT)
    assert seconds == WAIT, seconds
    return SHORT


class Waits:
    """The waits the example set, as it set them."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def shorten(self, seconds: Any) -> Any:
        self.seen.append(seconds)
        return _shorten(seconds)


def _keyed_session(module: Any, waits: Waits) -> None:
    real = module.anyio
    module.anyio = SimpleNamespace(
        fail_after=lambda seconds, *a, **k: real.fail_after(waits.shorten(seconds), *a, **k),
        run=real.run,
    )


def _client_timeout(module: Any, waits: Waits) -> None:
    real = module.Client

    def client(*args: Any, **kwargs: Any) -> Any:
        if "timeout" in kwargs:
            kwargs["timeout"] = waits.shorten(kwargs["timeout"])
        return real(*args, **kwargs)

    module.Client = client


def _openai_agents(module: Any, waits: Waits) -> None:
    real = module.MCPServerStdio

    def server(*args: Any, **kwargs: Any) -> Any:
        if "client_session_timeout_seconds" in kwargs:
            seconds = kwargs["client_session_timeout_seconds"]
            kwargs["client_session_timeout_seconds"] = waits.shorten(seconds)
        return real(*args, **kwargs)

    module.MCPServerStdio = server


def _langchain(module: Any, waits: Waits) -> None:
    module.timedelta = lambda **kw: waits.shorten(timedelta(**kw))


EXAMPLES: dict[str, tuple[str | None, Callable[[Any, Waits], None]]] = {
    "keyed_session": (None, _keyed_session),
    "fastmcp_client": ("fastmcp", _client_timeout),
    "openai_agents": ("agents", _openai_agents),
    "pydantic_ai_toolset": ("pydantic_ai", _client_timeout),
    "langchain_tools": ("langchain_mcp_adapters", _langchain),
}


def _is_timeout(exc: BaseException) -> bool:
    """A timeout, however the framework wraps it (an exception group, a chained cause)."""
    seen: list[BaseException] = [exc]
    while seen:
        error = seen.pop()
        if isinstance(error, TimeoutError) or "timed out" in str(error).lower():
            return True
        seen.extend(getattr(error, "exceptions", ()))  # an exception group
        seen.extend(e for e in (error.__cause__, error.__context__) if e is not None)
    return False


@pytest.mark.slow
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_ends_when_the_answer_is_lost(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    framework, shorten = EXAMPLES[name]
    if framework is not None and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    if framework == "fastmcp":
        pytest.importorskip("fastmcp", minversion="4.0")
    module = _load(name)
    waits = Waits()
    shorten(module, waits)
    # The server gets the SDK's default environment (HOME, not XDG_STATE_HOME): its default
    # store on stdio must land in a temporary home, never the real one.
    monkeypatch.setenv("HOME", str(tmp_path))
    server = [sys.executable, str(RELAY), str(tmp_path / "dropped"), sys.executable, str(SERVER)]
    outcome: dict[str, Any] = {}

    async def run() -> None:
        with anyio.move_on_after(BOUND) as bound:
            try:
                outcome["answer"] = await module.main(server)
            except Exception as exc:  # the framework gave up: it must say it timed out
                outcome["error"] = exc
        outcome["hung"] = bound.cancelled_caught

    started = time.monotonic()
    anyio.run(run)
    took = time.monotonic() - started
    assert not outcome["hung"], f"{name} still waited for its lost answer after {BOUND:.0f} s"
    assert waits.seen, f"{name} set no wait where the test shortens it (see EXAMPLES)"
    assert (tmp_path / "dropped").exists(), "the relay lost no answer"
    if "error" in outcome:
        assert _is_timeout(outcome["error"]), repr(outcome["error"])
    else:
        assert "charged 4200 usd (charge #1)" in outcome["answer"]
    print(f"{name}: {outcome.get('error') or 'replayed'!r} in {took:.1f} s")
