"""A lease that lapses because the process could not renew in time is never silent.

The lease keeper is a thread: a tool holding the GIL in one long C call (a catastrophic regex on
client input) starves it, the claim's lease runs out, and another instance sharing the store
could claim the key and run the tool a second time. idemtools cannot renew without the GIL, so
it reports: every renewal later than its lease allows is logged at ERROR (`lease lapsed`, the
key digest, by how much) and counted (`stats.lease_lapses`, `idemtools.lease.lapses`). The
subprocess tests run a real keyed call on the shared Redis; `time.sleep` (which releases the GIL)
is the control.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from idemtools import CallContext, Engine, Outcome, Policy, Registry, shared
from idemtools.engine import ToolCall, key_digest
from idemtools.engine.lease_keeper import Lease, LeaseKeeper
from idemtools.stores import MemoryStore
from tests.budget import examples
from tests.services import delete_redis_keys, need_redis

pytestmark = pytest.mark.sdk_free

KEY = "order-gil-1"

_SERVER = """
    import dataclasses, json, logging, re, sys, time
    import anyio
    from idemtools import CallContext, Engine, Outcome, Policy, Registry, shared
    from idemtools.engine import ToolCall
    from idemtools.stores import from_url

    url, prefix, how, key = sys.argv[1:5]
    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(message)s"
    )

    def regex_seconds(n):
        start = time.monotonic()
        re.match(r"(a+)+$", "a" * n + "b")
        return time.monotonic() - start

    # A catastrophic regex never releases the GIL; each extra "a" doubles its time. Tuned to
    # ~3.5 s on this machine from one short measurement.
    n = 0
    if how == "regex":
        n = 18
        while (took := regex_seconds(n)) < 0.05:
            n += 1
        n += max(0, round(__import__("math").log2(3.5 / took)))

    async def main():
        registry = Registry()
        registry.register("scan", Policy.of(scope=shared, retention=60, lease=1.0))
        engine = Engine(from_url(f"{url}?prefix={prefix}"), registry=registry)

        async def run():
            start = time.monotonic()
            print("started", file=sys.stderr, flush=True)
            if how == "regex":
                re.match(r"(a+)+$", "a" * n + "b")
            else:
                time.sleep(3.0)  # releases the GIL: the keeper renews on time
            text = f"scanned in {time.monotonic() - start:.2f}s"
            return Outcome(result={"content": [{"type": "text", "text": text}]})

        call = ToolCall(name="scan", arguments={}, key=key, context=CallContext(transport="stdio"))
        outcome = await engine.handle(call, run)
        await engine.aclose()
        print(json.dumps({"stats": dataclasses.asdict(engine.stats), "outcome": outcome.result}))

    anyio.run(main)
"""


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    url = need_redis()
    prefix = f"idemtools-test-gil-{uuid.uuid4().hex[:8]}:"
    yield url, prefix
    delete_redis_keys(prefix)


def _serve(url: str, prefix: str, how: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SERVER), url, prefix, how, KEY],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.services
def test_a_tool_holding_the_gil_past_its_lease_is_logged_and_counted(
    redis_prefix: tuple[str, str],
) -> None:
    report, stderr = _serve(*redis_prefix, "regex")
    text = report["outcome"]["content"][0]["text"]  # "scanned in 3.41s"
    assert float(text.split()[-1].rstrip("s")) > 1.5, f"the regex was too short to test: {text}"
    lapsed = [line for line in stderr.splitlines() if "lease lapsed" in line]
    assert len(lapsed) == 1, stderr
    line = lapsed[0]
    assert line.startswith("ERROR ")
    assert f"key_digest={key_digest(KEY)}" in line
    late = float(line.split(" s late")[0].rsplit(" ", 1)[1])
    assert 0.5 < late < 30, line  # the regex ran ~3 s against a 1 s lease
    assert report["stats"]["lease_lapses"] == 1


@pytest.mark.services
def test_a_tool_that_sleeps_past_its_lease_keeps_it(redis_prefix: tuple[str, str]) -> None:
    report, stderr = _serve(*redis_prefix, "sleep")
    assert "lease lapsed" not in stderr
    assert report["stats"]["lease_lapses"] == 0
    assert report["stats"]["lost_claims"] == 0


@pytest.mark.services
def test_a_second_instance_that_runs_the_tool_meanwhile_is_never_silent(
    redis_prefix: tuple[str, str],
) -> None:
    # The limit itself, as first reproduced: while the first process holds the GIL past
    # its lease, another instance sharing Redis claims the key and runs the tool. idemtools
    # cannot stop that from a thread; the first process says so, at ERROR, and keeps the
    # second execution's record (its own outcome is not recorded over it).
    import anyio

    from idemtools.stores import from_url

    url, prefix = redis_prefix
    first = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_SERVER), url, prefix, "regex", KEY],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stderr is not None
        # Log lines may come first (the shared Redis has no maxmemory: one WARNING).
        lines = iter(first.stderr.readline, "")
        assert any(line.strip() == "started" for line in lines), "the first process died"
        ran: list[str] = []

        async def second() -> Outcome:
            registry = Registry()
            registry.register("scan", Policy.of(scope=shared, retention=60, lease=1.0))
            engine = Engine(from_url(f"{url}?prefix={prefix}"), registry=registry)

            async def run() -> Outcome:
                ran.append("second")
                return Outcome(result={"content": [{"type": "text", "text": "second"}]})

            call = ToolCall("scan", {}, KEY, context=CallContext(transport="stdio"))
            with anyio.fail_after(10):
                while True:  # in progress until the first one's lease has run out
                    outcome = await engine.handle(call, run)
                    if ran or outcome.error is None:
                        break
                    await anyio.sleep(0.1)
            await engine.aclose()
            return outcome

        outcome = anyio.run(second)
        stdout, stderr = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert ran == ["second"] and outcome.result is not None  # two executions: the limit
    report = json.loads(stdout.strip().splitlines()[-1])
    assert report["stats"]["lease_lapses"] == 1
    assert report["stats"]["lost_claims"] >= 1  # its outcome was not recorded over the other
    lapsed = [line for line in stderr.splitlines() if "lease lapsed" in line]
    assert len(lapsed) == 1 and lapsed[0].startswith("ERROR ")
    assert f"key_digest={key_digest(KEY)}" in lapsed[0]


# -- in process: the keeper's own accounting ---------------------------------------------------


async def test_a_late_renewal_is_reported_once_with_its_lag() -> None:
    lapses: list[tuple[str, float]] = []
    keeper = LeaseKeeper(
        MemoryStore(),
        on_lost=lambda _held: None,
        on_error=lambda _held, _exc: None,
        on_lapse=lambda held, late: lapses.append((held.key, late)),
    )
    held = keeper.hold("s", "k", "o1", 1.0)
    held.claimed = True
    now = held.renewed_at
    keeper.check(held, now=now + 0.9)  # within its lease: nothing
    assert lapses == []
    keeper.check(held, now=now + 2.5)
    keeper.check(held, now=now + 2.6)  # the same gap: reported once
    assert [(k, round(late, 3)) for k, late in lapses] == [("k", 1.5)]
    keeper.drop(held)
    keeper.close()


async def test_an_unconfirmed_claim_is_not_reported() -> None:
    lapses: list[float] = []
    keeper = LeaseKeeper(
        MemoryStore(),
        on_lost=lambda _held: None,
        on_error=lambda _held, _exc: None,
        on_lapse=lambda _held, late: lapses.append(late),
    )
    held = keeper.hold("s", "k", "o1", 1.0)  # the claim is still on its way
    keeper.check(held, now=held.renewed_at + 5)
    assert lapses == []
    keeper.close()


async def test_a_completion_after_the_lease_is_a_lapse_counted_logged_and_exported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The engine checks when the tool returns too: a keeper starved until then may not have
    # run at all. Here the tool holds the loop *and* the keeper's thread is kept from renewing
    # by a lease shorter than its first renewal interval allows for: lease / 3 > the tool.
    reader = InMemoryMetricReader()
    registry = Registry()
    registry.register("scan", Policy.of(scope=shared, retention=60, lease=0.3))
    engine = Engine(MemoryStore(), registry=registry, meter_provider=MeterProvider([reader]))

    async def run() -> Outcome:
        # Stands in for a GIL-holding call: the keeper's renewals are held back meanwhile.
        with engine.keeper._lock:
            time.sleep(0.6)  # noqa: ASYNC251 - what the test is about
        return Outcome(result={"content": []})

    call = ToolCall("scan", {}, KEY, context=CallContext(transport="stdio"))
    with caplog.at_level(logging.ERROR, logger="idemtools"):
        await engine.handle(call, run)
    await engine.aclose()
    assert engine.stats.lease_lapses == 1
    lapsed = [r for r in caplog.records if "lease lapsed" in r.getMessage()]
    assert len(lapsed) == 1 and lapsed[0].levelno == logging.ERROR
    assert f"key_digest={key_digest(KEY)}" in lapsed[0].getMessage()
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "idemtools.lease.lapses"
        for p in m.data.data_points
    ]
    # a counter's points: `NumberDataPoint`s, with the attributes OTel types as optional
    assert [(dict(p.attributes), p.value) for p in points] == [  # type: ignore[arg-type,union-attr]
        ({"idemtools.store.name": "memory"}, 1)
    ]


@settings(max_examples=examples(200), deadline=None)
@given(
    lease=st.floats(0.05, 120),
    gaps=st.lists(st.floats(0.001, 400), min_size=1, max_size=30),
)
def test_every_gap_longer_than_the_lease_is_reported_once_with_its_lag(
    lease: float, gaps: list[float]
) -> None:
    # Renewals that succeed `gaps` apart, each checked before it is sent and again after it
    # succeeded (both of the keeper's checks), and once more by the engine at completion.
    assume(all(abs(gap - lease) > 1e-6 for gap in gaps))  # no float ties at the boundary
    lapses: list[float] = []
    keeper = LeaseKeeper(
        MemoryStore(),
        on_lost=lambda _held: None,
        on_error=lambda _held, _exc: None,
        on_lapse=lambda _held, late: lapses.append(late),
    )
    held = Lease("s", "k", "o1", lease, 0.0, None)
    held.claimed = True
    now = held.renewed_at = 1000.0
    for gap in gaps:
        now += gap
        keeper.check(held, now=now)  # the renewal is due: sent now
        keeper.check(held, now=now)  # it succeeded (no time passed)
        held.renewed_at = now
        keeper.check(held, now=now)  # the call completed at once
    expected = [gap - lease for gap in gaps if gap > lease]
    assert len(lapses) == len(expected)
    assert lapses == pytest.approx(expected, abs=1e-6)
