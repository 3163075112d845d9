"""Spans, the `idemtools.calls` counter and the `on_outcome` hook over a real MCP server.

Every SEP outcome is produced over the wire (each transport and era of this mcp line); what the
in-memory exporter and metric reader hold must name each outcome, and never a raw key. A
subprocess then installs the SDK globally only after `install()`, as an application that sets
up OpenTelemetry late would, and checks that idemtools picks it up and nests its span under
the SDK's own `tools/call` span (mcp 2.x).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from idemtools.engine import key_digest

from .conftest import Served
from .harness import LINE, error_type

KEYS = {
    "executed": "secret-order-4711",
    "conflict": "secret-order-4711",
    "in_progress": "secret-slow-0815",
    "refused": "x" * 300,  # longer than max_key_length: idempotency_key_invalid
}


async def test_every_outcome_is_exported_over_the_wire(served: Served) -> None:
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    told: list[tuple[str, str, str | None]] = []

    async def on_outcome(tool: str, kind: str, context: Any) -> None:
        told.append((tool, kind, context.refusal))

    options = {
        "on_outcome": on_outcome,
        "tracer_provider": tracer_provider,
        "meter_provider": meter_provider,
    }
    async with served(**options) as (app, wire):
        charge = {"name": "charge", "arguments": {"amount": 42}, "idempotencyKey": KEYS["executed"]}
        first = await wire.call(charge)
        again = await wire.call(charge)
        conflict = await wire.call({**charge, "arguments": {"amount": 43}})
        app.gate = anyio.Event()
        slow = {"name": "slow", "arguments": {}, "idempotencyKey": KEYS["in_progress"]}
        async with anyio.create_task_group() as tg:
            tg.start_soon(wire.call, slow)
            with anyio.fail_after(10):
                while app.count("slow") == 0:
                    await anyio.sleep(0.01)
            busy = await wire.call(slow)
            app.gate.set()
        refused = await wire.call({**charge, "idempotencyKey": KEYS["refused"]})
    assert again["result"] == first["result"] and app.count("charge") == 1
    assert error_type(conflict) == "idempotency_key_conflict"
    assert error_type(busy) == "idempotency_key_in_progress"
    assert error_type(refused) == "idempotency_key_invalid"

    ours = [s for s in spans.get_finished_spans() if s.name.startswith("idemtools ")]
    seen = [
        (s.name, s.attributes["idemtools.outcome"], s.attributes.get("idemtools.refusal"))  # type: ignore[index,union-attr]
        for s in ours
    ]
    assert seen == [
        ("idemtools charge", "executed", None),
        ("idemtools charge", "replayed", None),
        ("idemtools charge", "conflict", "idempotency_key_conflict"),
        ("idemtools slow", "in_progress", "idempotency_key_in_progress"),
        ("idemtools slow", "executed", None),
        ("idemtools charge", "refused", "idempotency_key_invalid"),
    ]
    assert told == [(name.split()[1], kind, refusal) for name, kind, refusal in seen]
    assert ours[0].attributes["idemtools.key_digest"] == key_digest(KEYS["executed"])  # type: ignore[index]

    data = reader.get_metrics_data()
    assert data is not None
    counts = {  # a counter's points, with the attributes OTel types as optional
        (p.attributes["gen_ai.tool.name"], p.attributes["idemtools.outcome"]): p.value  # type: ignore[index,union-attr]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "idemtools.calls"
        for p in m.data.data_points
    }
    assert counts == {
        ("charge", "executed"): 1,
        ("charge", "replayed"): 1,
        ("charge", "conflict"): 1,
        ("slow", "in_progress"): 1,
        ("slow", "executed"): 1,
        ("charge", "refused"): 1,
    }
    exported = [s.to_json(indent=None) for s in spans.get_finished_spans()]
    exported.append(data.to_json(indent=None))
    for key in set(KEYS.values()):
        assert not [text for text in exported if key[:64] in text]
    tracer_provider.shutdown()
    meter_provider.shutdown()


async def test_invented_tool_names_over_the_wire_are_one_series(served: Served) -> None:
    # 50 names the server does not have: the SDK answers "Unknown tool", idemtools records
    # nothing, and the operator's metrics and spans get one fixed name, not the client's text.
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    meter_provider = MeterProvider(metric_readers=[reader])
    options = {"tracer_provider": tracer_provider, "meter_provider": meter_provider}
    async with served(**options) as (app, wire):
        for i in range(50):
            name = f"invented-{i}-<script>"
            await wire.call({"name": name, "arguments": {}, "idempotencyKey": f"k-{i}"})
        await wire.call({"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-c"})
    assert app.count("charge") == 1
    ours = [s for s in spans.get_finished_spans() if s.name.startswith("idemtools ")]
    assert sorted({s.name for s in ours}) == ["idemtools _unknown", "idemtools charge"]
    data = reader.get_metrics_data()
    assert data is not None
    counts: dict[str, int] = {}
    p: Any  # a counter's points, with the attributes OTel types as optional
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "idemtools.calls":
                    for p in m.data.data_points:
                        name = str(p.attributes["gen_ai.tool.name"])
                        counts[name] = counts.get(name, 0) + int(p.value)
    assert counts == {"_unknown": 50, "charge": 1}
    assert "invented" not in data.to_json(indent=None)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def test_an_sdk_installed_after_install_is_picked_up() -> None:
    code = """
        import json
        import anyio
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from tests.e2e.harness import make_app, memory_wire

        app = make_app()  # no providers given: the global ones, which are not set yet
        telemetry = app.installation.engine.telemetry
        spans, reader = InMemorySpanExporter(), InMemoryMetricReader()

        async def main():
            async with memory_wire(app) as wire:
                call = {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-1"}
                await wire.call(call)
                before = telemetry.listening()
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(spans))
                trace.set_tracer_provider(provider)
                metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
                await anyio.sleep(1.1)  # idemtools looks at the global providers once a second
                await wire.call(call)
                await wire.call({**call, "idempotencyKey": "k-2"})
            return before

        before = anyio.run(main)
        by_id = {s.context.span_id: s for s in spans.get_finished_spans()}
        ours = [s for s in by_id.values() if s.name.startswith("idemtools ")]
        parents = [by_id.get(s.parent.span_id) if s.parent else None for s in ours]
        data = reader.get_metrics_data()
        calls = [
            p.value for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics if m.name == "idemtools.calls" for p in m.data.data_points
        ]
        print(json.dumps({
            "before": before,
            "outcomes": [s.attributes["idemtools.outcome"] for s in ours],
            "parents": [(p.name, p.kind.name) if p else None for p in parents],
            "calls": sum(calls),
        }))
        """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["before"] is False  # nothing installed yet: the engine's fast path
    assert found["outcomes"] == ["replayed", "executed"]
    assert found["calls"] == 2
    if LINE == 2:  # the SDK's own SERVER span is the parent
        assert found["parents"] == [["tools/call charge", "SERVER"]] * 2
    else:  # mcp 1.x makes no span of its own
        assert found["parents"] == [None, None]


@pytest.mark.skipif(LINE == 2, reason="mcp 2.x depends on opentelemetry-api itself")
def test_mcp1_server_without_opentelemetry() -> None:
    # mcp 1.x without the `otel` extra: install() works, keyed calls are deduplicated, and the
    # on_outcome hook is still told.
    code = """
        import sys
        sys.modules["opentelemetry"] = None
        import anyio
        from tests.e2e.harness import make_app, memory_wire

        told = []
        app = make_app(on_outcome=lambda tool, kind, context: told.append(kind))

        async def main():
            async with memory_wire(app) as wire:
                call = {"name": "charge", "arguments": {"amount": 1}, "idempotencyKey": "k-1"}
                first, again = await wire.call(call), await wire.call(call)
                assert first["result"] == again["result"]

        anyio.run(main)
        assert not [m for m in sys.modules if m.startswith("opentelemetry.")]
        print(told, app.count("charge"))
        """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['executed',", "'replayed']", "1"]
