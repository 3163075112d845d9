"""The engine's observers: telemetry and the `on_outcome` hook are two entries
of one list that the engine notifies, neither knowing of the other, and the list holds only
what was asked for: without a hook there is no hook observer for a call to pay for."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idemtools import CallContext, Engine, Outcome, Policy, Registry
from idemtools.engine import ToolCall
from idemtools.engine.observers import OutcomeHook, listening_of, observed
from idemtools.engine.telemetry import Telemetry
from idemtools.stores import MemoryStore

POLICY = Policy.of(retention=600, lease=30)
OK = Outcome(result={"content": [], "isError": False})


def call(key: str = "k-1", amount: int = 1) -> ToolCall:
    return ToolCall("charge", {"amount": amount}, key, CallContext(transport="stdio"))


async def run_ok() -> Outcome:
    return OK


@dataclass
class Recorder:
    """An observer that writes what it is told into a shared log."""

    name: str
    log: list[tuple[str, str]]
    listens: bool = True

    def listening(self) -> bool:
        return self.listens

    def begin(self, tool: str, key: object, policy: Policy, source: str = "sep") -> Watched:
        self.log.append((self.name, "begin"))
        return Watched(self.name, self.log)


@dataclass
class Watched:
    name: str
    log: list[tuple[str, str]]
    executing: bool = field(default=False)

    def detach(self) -> None:
        self.log.append((self.name, "detach"))

    def abandon(self, exc: BaseException) -> None:
        self.log.append((self.name, "abandon"))

    async def end(self, outcome: Outcome) -> None:
        self.log.append((self.name, "end"))


def test_without_a_hook_there_is_no_hook_observer() -> None:
    engine = Engine(MemoryStore(), registry=Registry())
    assert engine._observers == (engine.telemetry,)
    # The engine's per-call question is telemetry's own: no frame of the list's around it.
    assert engine._listening == engine.telemetry.listening
    hooked = Engine(MemoryStore(), registry=Registry(), on_outcome=lambda *told: None)
    assert [type(o) for o in hooked._observers] == [Telemetry, OutcomeHook]
    assert hooked._listening()  # a hook always listens
    assert not hasattr(hooked.telemetry, "on_outcome")  # telemetry knows nothing of it


async def test_every_listening_observer_is_told_in_the_lists_order() -> None:
    log: list[tuple[str, str]] = []
    observers = [Recorder("a", log), Recorder("quiet", log, listens=False), Recorder("c", log)]
    assert listening_of(observers)()

    async def handle(watch: Any) -> Outcome:
        log.append(("engine", "handle"))
        return OK

    assert await observed(observers, call(), POLICY, handle) is OK
    assert log == [
        ("a", "begin"),
        ("c", "begin"),
        ("engine", "handle"),
        ("a", "detach"),
        ("c", "detach"),
        ("a", "end"),
        ("c", "end"),
    ]
    assert not listening_of([Recorder("quiet", log, listens=False)])()


async def test_an_execution_ends_every_watch_itself_and_a_cancel_abandons_them() -> None:
    log: list[tuple[str, str]] = []
    observers = [Recorder("a", log), Recorder("b", log)]
    watches: list[Any] = []

    async def executes(watch: Any) -> Outcome:
        watch.executing = True  # as Engine._execute does: the execution ends the watch
        watches.append(watch)
        return OK

    await observed(observers, call(), POLICY, executes)
    assert ("a", "end") not in log and ("b", "end") not in log
    assert all(w.executing for w in watches[0].watches)  # told to every watch
    log.clear()

    async def cancelled(watch: Any) -> Outcome:
        raise anyio.get_cancelled_exc_class()

    with pytest.raises(anyio.get_cancelled_exc_class()):
        await observed(observers, call(), POLICY, cancelled)
    assert log == [
        ("a", "begin"),
        ("b", "begin"),
        ("a", "abandon"),
        ("b", "abandon"),
        ("a", "detach"),
        ("b", "detach"),
    ]


async def test_the_hook_is_told_after_the_span_has_ended() -> None:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    ended_before: list[tuple[str, int]] = []

    def hook(tool: str, kind: str, context: Any) -> None:
        ended_before.append((kind, len(spans.get_finished_spans())))

    engine = Engine(
        MemoryStore(),
        registry=Registry(),
        default_policy=POLICY,
        on_outcome=hook,
        tracer_provider=provider,
    )
    await engine.handle(call(), run_ok)
    await engine.handle(call(), run_ok)
    await engine.handle(call(amount=2), run_ok)
    assert ended_before == [("executed", 1), ("replayed", 2), ("conflict", 3)]
    provider.shutdown()
