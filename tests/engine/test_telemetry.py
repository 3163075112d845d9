"""OpenTelemetry spans and metrics, and the `on_outcome` hook, driven through `Engine.handle`.

The real opentelemetry-sdk (a `dev` dependency) exports into memory: spans through
`InMemorySpanExporter`, metrics through `InMemoryMetricReader`. Providers are given to the
engine explicitly, since the global ones can be set only once per process; the subprocess tests
cover the global providers (set after the engine was built) and an interpreter without
OpenTelemetry at all.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idemtools import CallContext, Engine, Outcome, Policy, Registry, StoreUnavailableError
from idemtools.engine import ToolCall, key_digest
from idemtools.engine.telemetry import OutcomeContext, OutcomeKind
from idemtools.stores import MemoryStore
from tests.budget import examples

STDIO = CallContext(transport="stdio")
POLICY = Policy.of(retention=600, lease=30)


def ok(text: str) -> Outcome:
    return Outcome(result={"content": [{"type": "text", "text": text}], "isError": False})


@dataclass
class Otel:
    """An SDK of our own: spans and metrics land in memory."""

    spans: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)
    tracer_provider: TracerProvider = field(default_factory=TracerProvider)
    meter_provider: MeterProvider = field(init=False)

    def __post_init__(self) -> None:
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def engine(self, store: Any = None, **options: Any) -> Engine:
        options.setdefault("default_policy", POLICY)
        # Its own registry: the process-wide one holds whatever other tests' servers declared.
        options.setdefault("registry", Registry())
        return Engine(
            store if store is not None else MemoryStore(),
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,
        )

    def finished(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith("idemtools ")]

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def calls(self) -> dict[tuple[tuple[str, Any], ...], int]:
        """`idemtools.calls` by attribute set."""
        return {
            tuple(sorted(p.attributes.items())): p.value for p in self.points("idemtools.calls")
        }


@pytest.fixture
def otel() -> Iterator[Otel]:
    found = Otel()
    yield found
    found.tracer_provider.shutdown()
    found.meter_provider.shutdown()


class Hook:
    """An on_outcome hook that remembers what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, OutcomeKind, OutcomeContext]] = []

    def __call__(self, tool: str, kind: OutcomeKind, context: OutcomeContext) -> None:
        self.seen.append((tool, kind, context))

    @property
    def kinds(self) -> list[str]:
        return [kind for _tool, kind, _ in self.seen]


def call(key: object, name: str = "charge", **arguments: Any) -> ToolCall:
    return ToolCall(name=name, arguments=arguments or {"amount": 1}, key=key, context=STDIO)


async def run_ok() -> Outcome:
    return ok("charged")


async def outcome_table(engine: Engine, key: str = "k-1") -> list[Outcome]:
    """executed, replayed, conflict, in_progress, refused (key invalid), in that order."""
    answers = [await engine.handle(call(key), run_ok), await engine.handle(call(key), run_ok)]
    answers.append(await engine.handle(call(key, amount=2), run_ok))
    gate, started = anyio.Event(), anyio.Event()

    async def blocked() -> Outcome:
        started.set()
        await gate.wait()
        return ok("slow")

    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.handle, call(key + "-slow"), blocked)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        await started.wait()
        answers.append(await engine.handle(call(key + "-slow"), run_ok))
        gate.set()
    answers.append(await engine.handle(call(""), run_ok))
    return answers


async def test_every_outcome_gets_a_span_a_count_and_a_hook_call(otel: Otel) -> None:
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    answers = await outcome_table(engine)
    assert [a.is_error for a in answers] == [False, False, True, True, True]

    spans = otel.finished()
    by_outcome: dict[Any, ReadableSpan] = {}
    for span in spans:  # the first of each: the blocked call's execution ends after it
        by_outcome.setdefault(span.attributes["idemtools.outcome"], span)  # type: ignore[index]
    assert sorted(by_outcome) == ["conflict", "executed", "in_progress", "refused", "replayed"]
    assert len(spans) == 6  # the blocked call's execution too
    for span in spans:
        assert span.name == "idemtools charge"
        assert span.attributes is not None and span.attributes["gen_ai.tool.name"] == "charge"
    assert by_outcome["executed"].attributes["idemtools.key_digest"] == key_digest("k-1")  # type: ignore[index]
    assert "idemtools.refusal" not in by_outcome["executed"].attributes  # type: ignore[operator]
    assert "idemtools.refusal" not in by_outcome["replayed"].attributes  # type: ignore[operator]
    refusals = {
        k: by_outcome[k].attributes["idemtools.refusal"]  # type: ignore[index]
        for k in ("conflict", "in_progress", "refused")
    }
    assert refusals == {
        "conflict": "idempotency_key_conflict",
        "in_progress": "idempotency_key_in_progress",
        "refused": "idempotency_key_invalid",
    }

    def attrs(kind: str, refusal: str | None = None) -> tuple[tuple[str, Any], ...]:
        found = {
            "idemtools.outcome": kind,
            "gen_ai.tool.name": "charge",
            "idemtools.key_source": "sep",
        }
        if refusal:
            found["idemtools.refusal"] = refusal
        return tuple(sorted(found.items()))

    assert otel.calls() == {
        attrs("executed"): 2,
        attrs("replayed"): 1,
        attrs("conflict", "idempotency_key_conflict"): 1,
        attrs("in_progress", "idempotency_key_in_progress"): 1,
        attrs("refused", "idempotency_key_invalid"): 1,
    }

    # The hook: in answer order, except that the blocked execution ends after its refusal.
    assert hook.kinds == ["executed", "replayed", "conflict", "in_progress", "executed", "refused"]
    executed = hook.seen[0][2]
    assert executed.key_digest == key_digest("k-1") and executed.refusal is None
    assert executed.outcome == answers[0] and executed.policy == POLICY
    assert hook.seen[1][2].outcome == answers[1]  # the replay's answer
    assert [ctx.outcome for _t, k, ctx in hook.seen if k not in ("executed", "replayed")] == [
        None
    ] * 3
    assert all(ctx.duration >= 0 for _t, _k, ctx in hook.seen)


def test_on_trio_too(otel: Otel) -> None:
    # trio runs the execution inline under a shield, not in a task of its own.
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    anyio.run(outcome_table, engine, backend="trio")
    assert hook.kinds == ["executed", "replayed", "conflict", "in_progress", "executed", "refused"]
    outcomes = sorted(s.attributes["idemtools.outcome"] for s in otel.finished())  # type: ignore[index,type-var]
    assert outcomes == sorted(hook.kinds)
    assert sum(otel.calls().values()) == 6


async def test_the_tool_runs_inside_the_call_span(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("the-tool")

    async def traced() -> Outcome:
        with tracer.start_as_current_span("charge the card"):
            return ok("charged")

    engine = otel.engine()
    parent = otel.tracer_provider.get_tracer("app").start_span("tools/call charge")
    from opentelemetry import trace

    with trace.use_span(parent, end_on_exit=True):
        await engine.handle(call("k-nest"), traced)
        await engine.handle(call("k-nest"), traced)  # a replay: nothing runs beneath it
    spans = {s.name: s for s in otel.spans.get_finished_spans() if s.name != "idemtools charge"}
    ours = otel.finished()
    executed = next(s for s in ours if s.attributes["idemtools.outcome"] == "executed")  # type: ignore[index]
    replayed = next(s for s in ours if s.attributes["idemtools.outcome"] == "replayed")  # type: ignore[index]
    assert spans["charge the card"].parent is not None
    assert spans["charge the card"].parent.span_id == executed.context.span_id  # type: ignore[union-attr]
    for span in (executed, replayed):
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    children = [s for s in otel.spans.get_finished_spans() if s.parent is not None]
    assert not [s for s in children if s.parent.span_id == replayed.context.span_id]  # type: ignore[union-attr]


async def test_store_operations_are_timed(otel: Otel) -> None:
    engine = otel.engine()
    await engine.handle(call("k-t"), run_ok)
    await engine.handle(call("k-t"), run_ok)

    async def not_final() -> Outcome:  # MRTR input_required: released, not recorded
        return Outcome(result={"resultType": "input_required"}, final=False)

    await engine.handle(call("k-r"), not_final)
    counts = {
        (p.attributes["idemtools.store.operation"], p.attributes["idemtools.store.name"]): p.count
        for p in otel.points("idemtools.store.duration")
    }
    assert counts == {("claim", "memory"): 3, ("complete", "memory"): 1, ("release", "memory"): 1}
    assert all(0 <= p.min <= p.max < 5 for p in otel.points("idemtools.store.duration"))


async def test_a_lease_renewal_is_timed(otel: Otel) -> None:
    engine = otel.engine(default_policy=Policy.of(lease=0.3))

    async def long() -> Outcome:
        await anyio.sleep(0.25)  # past a third of the lease: renewed at least once
        return ok("done")

    try:
        await engine.handle(call("k-renew"), long)
    finally:
        await engine.aclose()
    operations = {
        p.attributes["idemtools.store.operation"] for p in otel.points("idemtools.store.duration")
    }
    assert "renew" in operations


async def test_a_lapsed_claim_is_counted_by_what_on_lapse_did(otel: Otel) -> None:
    # An execution stops renewing inside the tool (its engine's keeper closed: to the store, a
    # dead process) and its lease runs out; retries on another engine find the lapsed claims.
    store = MemoryStore()
    dead = Engine(store, registry=Registry())
    lease = 0.3
    entered, forever = anyio.Event(), anyio.Event()
    runs = 0

    async def charge() -> Outcome:
        nonlocal runs
        runs += 1
        if runs <= 2:  # the first run of each key hangs: the process that will "die"
            if runs == 2:
                entered.set()
            await forever.wait()
        return ok(f"charged, run {runs}")

    def keyed(key: str, on_lapse: str) -> ToolCall:
        policy = Policy.of(retention=60, lease=lease, on_lapse=on_lapse)  # type: ignore[arg-type]
        return ToolCall(
            name="charge", arguments={"amount": 1}, key=key, context=STDIO, policy=policy
        )

    engine = otel.engine(store)
    async with anyio.create_task_group() as tg:
        tg.start_soon(dead.handle, keyed("k-rerun", "rerun"), charge)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        tg.start_soon(dead.handle, keyed("k-refuse", "refuse"), charge)  # type: ignore[arg-type]  # a coroutine, typed Awaitable
        with anyio.fail_after(5):
            await entered.wait()
        dead.keeper.close()
        await anyio.sleep(lease * 3)
        rerun = await engine.handle(keyed("k-rerun", "rerun"), charge)
        refused = await engine.handle(keyed("k-refuse", "refuse"), charge)
        tg.cancel_scope.cancel()
    await engine.aclose()
    assert rerun.error is None and runs == 3, rerun
    assert refused.error is not None
    assert refused.error["data"]["type"] == "idempotency_outcome_unknown"
    assert engine.stats.lapsed_claims == 2 and engine.stats.lapsed_reruns == 1
    counted = {
        tuple(sorted(p.attributes.items())): p.value for p in otel.points("idemtools.lapsed_claims")
    }
    assert counted == {
        (("idemtools.on_lapse", "refuse"), ("idemtools.store.name", "memory")): 1,
        (("idemtools.on_lapse", "rerun"), ("idemtools.store.name", "memory")): 1,
    }


class FailingStore(MemoryStore):
    async def claim(self, *args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("redis at 10.0.0.7 went away")


async def test_a_failing_store_is_refused_and_its_error_timed(otel: Otel) -> None:
    hook = Hook()
    engine = otel.engine(FailingStore(), on_outcome=hook)
    answer = await engine.handle(call("k-down"), run_ok)
    assert answer.error is not None
    assert answer.error["data"]["type"] == StoreUnavailableError.type
    assert hook.kinds == ["refused"] and hook.seen[0][2].refusal == StoreUnavailableError.type
    (span,) = otel.finished()
    assert span.attributes["idemtools.refusal"] == "idempotency_store_unavailable"  # type: ignore[index]
    # The claim failed; a release follows (it may have landed), timed as its own operation.
    points = otel.points("idemtools.store.duration")
    assert [p.attributes["idemtools.store.operation"] for p in points] == ["claim", "release"]
    assert points[0].attributes["error.type"] == "ConnectionError"


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_a_failing_hook_changes_nothing(
    otel: Otel, style: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    def sync_hook(tool: str, kind: OutcomeKind, context: OutcomeContext) -> None:
        seen.append(kind)
        raise RuntimeError("metrics backend down")

    async def async_hook(tool: str, kind: OutcomeKind, context: OutcomeContext) -> None:
        await anyio.lowlevel.checkpoint()
        sync_hook(tool, kind, context)

    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        return ok(f"run {runs}")

    engine = otel.engine(on_outcome=sync_hook if style == "sync" else async_hook)
    with caplog.at_level(logging.ERROR, logger="idemtools"):
        first = await engine.handle(call("k-h"), tool)
        again = await engine.handle(call("k-h"), tool)
    assert first == ok("run 1") and again == first and runs == 1
    assert seen == ["executed", "replayed"]
    assert caplog.text.count("on_outcome hook failed") == 2
    assert "k-h" not in caplog.text.replace(key_digest("k-h"), "")
    assert [s.attributes["idemtools.outcome"] for s in otel.finished()] == ["executed", "replayed"]  # type: ignore[index]


class BrokenProcessor(SpanProcessor):
    def __init__(self, where: str) -> None:
        self.where = where

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if self.where == "start":
            raise RuntimeError("processor broken on start")

    def on_end(self, span: Any) -> None:
        if self.where == "end":
            raise RuntimeError("processor broken on end")


@pytest.mark.parametrize("where", ["start", "end"])
async def test_a_broken_span_processor_changes_no_answer(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    otel = Otel()
    otel.tracer_provider.add_span_processor(BrokenProcessor(where))
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    runs = 0

    async def tool() -> Outcome:
        nonlocal runs
        runs += 1
        return ok("charged")

    with caplog.at_level(logging.ERROR, logger="idemtools"):
        first = await engine.handle(call("k-broken"), tool)
        again = await engine.handle(call("k-broken"), tool)
    assert first == again == ok("charged") and runs == 1
    assert hook.kinds == ["executed", "replayed"]  # the hook is still told
    assert "processor broken" in caplog.text
    assert sum(otel.calls().values()) == 2


async def test_a_caller_that_leaves_still_gets_its_execution_reported(otel: Otel) -> None:
    # The client cancels while the tool runs: the tool goes on to its record (the engine's
    # shield), and the hook and span still say "executed" once it has.
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    started, gate = anyio.Event(), anyio.Event()

    async def tool() -> Outcome:
        started.set()
        await gate.wait()
        return ok("done")

    caller = asyncio.ensure_future(engine.handle(call("k-gone"), tool))
    await started.wait()
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert hook.kinds == []
    gate.set()
    with anyio.fail_after(5):
        while not hook.kinds:
            await anyio.sleep(0.01)
    assert hook.kinds == ["executed"]
    assert [s.attributes["idemtools.outcome"] for s in otel.finished()] == ["executed"]  # type: ignore[index]
    assert (await engine.handle(call("k-gone"), tool)) == ok("done")  # replayed, not run again


async def test_a_claim_cancelled_before_an_answer_ends_its_span(otel: Otel) -> None:
    hook = Hook()

    class SlowStore(MemoryStore):
        async def claim(self, *args: Any, **kwargs: Any) -> Any:
            await anyio.sleep(10)
            raise AssertionError("never")

    engine = otel.engine(SlowStore(), on_outcome=hook)
    engine.release_retry_delay = 0.0
    with anyio.move_on_after(0.05):
        await engine.handle(call("k-c"), run_ok)
    (span,) = otel.finished()
    assert "idemtools.outcome" not in span.attributes  # type: ignore[operator]
    assert span.attributes["error.type"] == "CancelledError"  # type: ignore[index]
    assert hook.kinds == []


_KEYS = st.text(min_size=1, max_size=200).map(lambda t: "RAWKEY\u2603" + t)


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(key=_KEYS)
def test_raw_keys_never_reach_spans_metrics_or_the_hook(key: str) -> None:
    otel = Otel()
    hook = Hook()
    engine = otel.engine(on_outcome=hook, max_key_length=1000)

    async def scenario() -> None:
        await outcome_table(engine, key)

    anyio.run(scenario)
    spans = otel.spans.get_finished_spans()
    assert spans, "nothing exported: the property would hold vacuously"
    data = otel.reader.get_metrics_data()
    assert data is not None
    # What is exported, as exporters serialise it (JSON, so the key's escaped form is checked
    # too), and every string value as it is held (names, attributes, events, status).
    texts = [s.to_json(indent=None) for s in spans] + [data.to_json(indent=None)]
    texts.extend(repr(context) for _t, _k, context in hook.seen)
    for span in spans:
        texts.extend([span.name, span.status.description or ""])
        # as held: a bytes value would show as its repr, which the check reads too
        texts.extend(f"{k}={v}" for k, v in (span.attributes or {}).items())  # type: ignore[str-bytes-safe]
        texts.extend(f"{e.name} {dict(e.attributes or {})}" for e in span.events)
    for point in [
        p for name in ("idemtools.calls", "idemtools.store.duration") for p in otel.points(name)
    ]:
        texts.extend(f"{k}={v}" for k, v in point.attributes.items())
    forms = {key, key[:64], json.dumps(key)[1:-1][:64]}
    for text in texts:
        for form in forms:
            assert form not in text
    assert any(key_digest(key) in text for text in texts)  # the digest does travel
    otel.tracer_provider.shutdown()
    otel.meter_provider.shutdown()


def _python(code: str, *, timeout: float = 60) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_without_opentelemetry_everything_works_and_the_hook_still_runs() -> None:
    out = _python(
        """
        import sys
        sys.modules["opentelemetry"] = None  # as on mcp 1.x without the otel extra
        import anyio
        from idemtools import CallContext, Engine, Outcome
        from idemtools.engine import ToolCall
        from idemtools.stores import MemoryStore

        seen = []
        engine = Engine(MemoryStore(), on_outcome=lambda tool, kind, ctx: seen.append(kind))
        bare = Engine(MemoryStore())
        call = ToolCall("t", {"a": 1}, "k", CallContext(transport="stdio"))

        async def run():
            return Outcome(result={"content": []})

        async def main():
            for e in (engine, bare):
                await e.handle(call, run)
                await e.handle(call, run)

        anyio.run(main)
        assert "opentelemetry.trace" not in sys.modules
        print(seen, bare.telemetry.listening(), bare.stats.replays)
        """
    )
    assert out.split() == ["['executed',", "'replayed']", "False", "1"]


# -- tool names: one fixed value for tools that do not exist ------------------------------------


def unknown_tool(name: str) -> Any:
    """What an adapter's run() answers for a tool the server does not have: not final."""

    async def run() -> Outcome:
        text = f"Unknown tool: {name}"
        return Outcome(
            result={"content": [{"type": "text", "text": text}], "isError": True}, final=False
        )

    return run


def tool_names(otel: Otel) -> dict[str, int]:
    counts: dict[str, int] = {}
    for point in otel.points("idemtools.calls"):
        name = point.attributes["gen_ai.tool.name"]
        counts[name] = counts.get(name, 0) + point.value
    return counts


async def test_invented_tool_names_are_one_series_and_never_a_span_name(otel: Otel) -> None:
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    invented = [f"tool-{i}-{'x' * (i % 7)}" for i in range(500)]
    for i, name in enumerate(invented):
        key = f"k-{i}" if i % 5 else ""  # some refused before anything could tell
        await engine.handle(call(key, name=name), unknown_tool(name))
    assert tool_names(otel) == {"_unknown": 500}
    spans = otel.finished()
    assert len(spans) == 500
    assert {s.name for s in spans} == {"idemtools _unknown"}
    assert {s.attributes["gen_ai.tool.name"] for s in spans} == {"_unknown"}  # type: ignore[index]
    # The application's own hook still hears the name the client sent.
    assert [tool for tool, _k, _c in hook.seen] == invented


async def test_a_tool_is_named_once_it_is_known(otel: Otel) -> None:
    registry = Registry()
    registry.register("declared", POLICY)
    engine = otel.engine(registry=registry)
    # Declared with a policy: named from the first call, refusals included.
    await engine.handle(call("", name="declared"), run_ok)
    # Not declared: named once it ran (its own span too), and from then on.
    await engine.handle(call("k-1", name="plain"), run_ok)
    await engine.handle(call("k-1", name="plain"), run_ok)  # replay
    await engine.handle(call("k-1", name="plain", amount=2), run_ok)  # conflict
    await engine.handle(call("", name="plain"), run_ok)  # invalid key
    assert tool_names(otel) == {"declared": 1, "plain": 4}
    assert (
        sorted(s.name for s in otel.finished()) == ["idemtools declared"] + ["idemtools plain"] * 4
    )


async def test_a_replay_names_its_tool_after_a_restart(otel: Otel) -> None:
    store = MemoryStore()
    await otel.engine(store).handle(call("k-r", name="plain"), run_ok)
    restarted = otel.engine(store)
    await restarted.handle(call("k-r", name="plain"), run_ok)  # replayed from the record
    await restarted.handle(call("k-r", name="invented"), run_ok)  # conflict: proves nothing
    names = {
        (p.attributes["gen_ai.tool.name"], p.attributes["idemtools.outcome"]): p.value
        for p in otel.points("idemtools.calls")
    }
    assert names == {
        ("plain", "executed"): 1,
        ("plain", "replayed"): 1,
        ("_unknown", "conflict"): 1,
    }


async def test_learned_names_are_bounded(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    import idemtools.engine.telemetry as telemetry

    monkeypatch.setattr(telemetry, "MAX_TOOL_NAMES", 3)
    engine = otel.engine()
    for i in range(6):  # a server that runs whatever name it is sent
        await engine.handle(call(f"k-{i}", name=f"t{i}"), run_ok)
    assert tool_names(otel) == {"t0": 1, "t1": 1, "t2": 1, "_unknown": 3}


async def test_the_key_source_is_on_the_span_the_count_the_hook_and_the_log(
    otel: Otel, caplog: pytest.LogCaptureFixture
) -> None:
    """`sep`, `argument` or `derived`, wherever a keyed call is reported."""
    hook = Hook()
    engine = otel.engine(on_outcome=hook)
    for source in ("sep", "argument", "derived"):
        sourced = ToolCall("charge", {"amount": 1}, f"k-{source}", STDIO, source=source)
        await engine.handle(sourced, run_ok)
    with caplog.at_level(logging.INFO, logger="idemtools"):
        await engine.handle(ToolCall("charge", None, "", STDIO, source="argument"), run_ok)
    spans = [s.attributes or {} for s in otel.finished()]
    assert [a["idemtools.key_source"] for a in spans] == ["sep", "argument", "derived", "argument"]
    by_source: dict[str, int] = {}
    for attributes, value in otel.calls().items():
        source = dict(attributes)["idemtools.key_source"]
        by_source[source] = by_source.get(source, 0) + value
    assert by_source == {"sep": 1, "argument": 2, "derived": 1}
    assert [ctx.key_source for _t, _k, ctx in hook.seen] == [
        "sep",
        "argument",
        "derived",
        "argument",
    ]
    assert "key_source=argument" in caplog.text
