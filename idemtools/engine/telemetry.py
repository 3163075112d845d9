"""What each keyed call came to, for OpenTelemetry and for the application's own hook.

Every keyed `tools/call` gets one span, `idemtools <tool>` (kind INTERNAL, instrumentation scope
`idemtools`), a child of whatever span is current: on mcp 2.x the SDK's own `tools/call <tool>`
SERVER span, on mcp 1.x the application's (or none). It is current while the call is claimed
and while its tool runs, so the tool's own spans nest under it: a replay is a short span with
nothing beneath it. Attributes:

- `idemtools.outcome`: executed, replayed, conflict, in_progress or refused;
- `idemtools.refusal`: the answer's `error.data.type` when it is an idemtools refusal
  (always for conflict, in_progress and refused), e.g. `idempotency_store_unavailable`;
- `gen_ai.tool.name`: the tool, under the name the MCP semantic conventions (and the mcp 2.x
  SDK's span) use, once the tool is known to exist; `_unknown` until then (see below);
- `idemtools.key_digest`: the key's SHA-256 prefix that log lines carry; never the key;
- `idemtools.key_source`: where the key came from: `sep` (the client's `idempotencyKey`),
  `argument` or `derived` (the server-side bridges of `idemtools.bridges`).

A counter `idemtools.lease.lapses` (`idemtools.store.name`) counts leases that ran out while
their call was still running: the process could not renew in time (a tool holding the GIL, a
paused process, an unreachable store), so another instance may have run the tool again.

A counter `idemtools.lapsed_claims` (`idemtools.store.name`, `idemtools.on_lapse`: rerun,
refuse or reconcile) counts retries that found a lapsed claim: an earlier execution entered
the tool and its end was never recorded (its process died), and the policy's `on_lapse` decided.

A counter `idemtools.calls` has the same attributes but the digest (one time series per key
would ruin any metrics backend), and a histogram `idemtools.store.duration` (seconds) times
every store operation (`idemtools.store.operation`: claim, complete, release, renew, get;
`idemtools.store.name`: the store's kind; `error.type` when it failed).

Tool names are client text: a client inventing 500 names would make 500 time series and put
whatever it likes into the operator's dashboards. So a name is exported (metric, span name and
attribute) only for a tool known to exist: one with a policy of its own (`@idempotent`, the
registry), or one this process has seen execute to a recorded outcome or replay one (adapters
answer an unknown tool without recording it; a replay matched a record's tool name, which an
execution wrote). Every other call is `_unknown` (`UNKNOWN_TOOL`). At most `MAX_TOOL_NAMES`
names are learned so; the `on_outcome` hook, the application's own code, gets the name as sent.

`Telemetry` is one of the engine's observers (`idemtools.engine.observers`); the `on_outcome`
hook is another, registered beside it only when one is given, and neither knows of the other.
This module holds the words both use: `OutcomeKind` (what a call came to, `outcome_kind`) and
the hook's own types, `OnOutcome` and `OutcomeContext`.

Only `opentelemetry-api` is used (a dependency of mcp 2.x, the `otel` extra on 1.x), imported
when an engine is built; without it, or until the application installs an SDK, all of this is
skipped for the price of one clock read per call. The global providers are looked at again
once a second until they are real, because an application may install its SDK after
`install()`: OpenTelemetry's providers can be set once, so a real one, once seen, is kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from ..outcome import Outcome
from ..policy import Policy

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "MAX_TOOL_NAMES",
    "UNKNOWN_TOOL",
    "OnOutcome",
    "OutcomeContext",
    "OutcomeKind",
    "Telemetry",
]

log = logging.getLogger("idemtools")

T = TypeVar("T")

OutcomeKind = Literal["executed", "replayed", "conflict", "in_progress", "refused"]
"""What a keyed call came to: the tool ran; its recorded answer was replayed; the key was used
with other arguments; the key's first call is still running; or idemtools refused the call
(invalid key, unauthorized, store unavailable...) without running anything."""

OUTCOME = "idemtools.outcome"
REFUSAL = "idemtools.refusal"
TOOL = "gen_ai.tool.name"  # OpenTelemetry MCP / GenAI semantic conventions
KEY_DIGEST = "idemtools.key_digest"
KEY_SOURCE = "idemtools.key_source"
ON_LAPSE = "idemtools.on_lapse"
STORE_OPERATION = "idemtools.store.operation"
STORE_NAME = "idemtools.store.name"

UNKNOWN_TOOL = "_unknown"
"""`gen_ai.tool.name` (and span name) of a call to a tool not known to exist."""

MAX_TOOL_NAMES = 1000
"""Tool names learned from executions and replays, at most; later new ones stay `_unknown`."""

_RECHECK = 1.0  # seconds between looks at the global providers while they are the proxies
# Store operations take from tens of microseconds (memory) to tens of milliseconds (a remote
# database); the API's default boundaries are meant for milliseconds.
_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)
_CONFLICT = "idempotency_key_conflict"
_IN_PROGRESS = "idempotency_key_in_progress"


@dataclass(frozen=True, slots=True)
class OutcomeContext:
    """What the `on_outcome` hook learns about a keyed call, all of it safe to log or export.

    Attributes:
        key_digest: the key's hash, as in idemtools' log lines and spans. The raw key is
            client data that may carry meaning (an order number, an e-mail): it is not given.
        refusal: the answer's `error.data.type` when it is an idemtools refusal, else None:
            always for conflict, in_progress and refused; for a replay of a recorded refusal
            (`idempotency_outcome_too_large`); for an executed call whose transaction did not
            commit (`idempotency_store_unavailable`).
        policy: the tool's policy (retention, lease, scope strategy).
        outcome: the answer (a replay's is what the execution answered), or None when it is an
            idemtools refusal, whose `error.data` echoes the key.
        duration: seconds from the call reaching idemtools to its answer.
    """

    key_digest: str
    refusal: str | None
    policy: Policy
    outcome: Outcome | None
    duration: float
    key_source: str = "sep"


class OnOutcome(Protocol):
    """The `on_outcome` hook: `hook(tool, kind, context)`, a function or a coroutine function.

    Called once per keyed call, when its answer is known: for your own metrics, audit trails
    and business events ("order placed" on executed, never again on replayed). It is awaited
    before the answer is sent (for an executed call, inside the execution's shield, so it is
    told even when the client left meanwhile); keep it quick and hand slow work to a queue.
    Whatever it raises is logged at ERROR and changes neither the answer nor the record.
    """

    def __call__(
        self, tool: str, kind: OutcomeKind, context: OutcomeContext, /
    ) -> Awaitable[None] | None: ...


class Telemetry:
    """One engine's OpenTelemetry spans and metrics: an observer of its keyed calls.

    Args:
        tracer_provider: use this instead of the global tracer provider.
        meter_provider: use this instead of the global meter provider.
        store_name: the `idemtools.store.name` of store durations.
        digest: the key's hash (the engine's `key_digest`, so spans match log lines).
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        store_name: str = "",
        digest: Callable[[object], str],
    ) -> None:
        self.digest = digest
        self._tools: set[str] = set()  # names seen to exist (executed or replayed)
        self._operations: dict[str, dict[str, str]] = {}
        self.store_name = store_name
        self.tracer: Tracer | None = None
        self.calls: Counter | None = None
        self.durations: Histogram | None = None
        self.lapses: Counter | None = None
        self.lapsed_claims: Counter | None = None
        self._due: float | None = None  # next look at the global providers; None: settled
        self._tracing_settled = self._metrics_settled = True
        try:
            import opentelemetry.metrics
            import opentelemetry.trace  # noqa: F401  (the `otel` extra on mcp 1.x)
        except ImportError:
            available = False
        else:
            available = True
        if available:
            if tracer_provider is not None:
                self._use_tracer(tracer_provider)
            else:
                self._tracing_settled = False
            if meter_provider is not None:
                self._use_meter(meter_provider)
            else:
                self._metrics_settled = False
            if not (self._tracing_settled and self._metrics_settled):
                self._due = 0.0
                self._look()
        self._refresh_listening()

    # -- providers ----------------------------------------------------------------------------

    def _use_tracer(self, provider: TracerProvider) -> None:
        self.tracer = provider.get_tracer("idemtools")
        self._tracing_settled = True

    def _use_meter(self, provider: MeterProvider) -> None:
        meter = provider.get_meter("idemtools")
        self.calls = meter.create_counter(
            "idemtools.calls", unit="{call}", description="Keyed tools/call requests by outcome"
        )
        self.durations = meter.create_histogram(
            "idemtools.store.duration",
            unit="s",
            description="Duration of idempotency store operations",
            explicit_bucket_boundaries_advisory=_BUCKETS,
        )
        self.lapses = meter.create_counter(
            "idemtools.lease.lapses",
            unit="{lapse}",
            description="Leases that ran out while their call was still running (not renewed "
            "in time)",
        )
        self.lapsed_claims = meter.create_counter(
            "idemtools.lapsed_claims",
            unit="{claim}",
            description="Lapsed claims found by a retry (an execution whose end was never "
            "recorded), by on_lapse",
        )
        self._metrics_settled = True

    def _look(self) -> None:
        """Adopt the global providers once the application has set real ones."""
        from opentelemetry import metrics, trace

        if not self._tracing_settled:
            provider = trace.get_tracer_provider()
            if isinstance(provider, trace.NoOpTracerProvider):
                self._tracing_settled = True  # set on purpose, and it cannot change any more
            elif not isinstance(provider, trace.ProxyTracerProvider):
                self._use_tracer(provider)
        if not self._metrics_settled:
            meter_provider = metrics.get_meter_provider()
            if isinstance(meter_provider, metrics.NoOpMeterProvider):
                self._metrics_settled = True
            elif type(meter_provider).__name__ != "_ProxyMeterProvider":  # not public
                self._use_meter(meter_provider)
        if self._tracing_settled and self._metrics_settled:
            self._due = None
        else:
            self._due = time.monotonic() + _RECHECK

    def _refresh_listening(self) -> None:
        self._listening = self.tracer is not None or self.calls is not None

    def listening(self) -> bool:
        """True when a span or a metric would see a call; else the call is not observed here."""
        if self._due is not None and time.monotonic() >= self._due:
            self._look()
            self._refresh_listening()
        return self._listening

    def lease_lapsed(self) -> None:
        """Count one lease that lapsed while its call ran (from any thread)."""
        if self.lapses is not None:
            try:
                self.lapses.add(1, {STORE_NAME: self.store_name})
            except Exception:  # a broken SDK or reader must not break the keeper
                log.exception("could not count a lease lapse")

    def lapsed_claim(self, on_lapse: str) -> None:
        """Count one lapsed claim a retry found, by what its policy's `on_lapse` did."""
        if self.lapsed_claims is not None:
            try:
                self.lapsed_claims.add(1, {STORE_NAME: self.store_name, ON_LAPSE: on_lapse})
            except Exception:
                log.exception("could not count a lapsed claim")

    # -- tool names ---------------------------------------------------------------------------

    def tool_label(self, tool: str, policy: Policy) -> str:
        """The name to export for `tool`: itself when known to exist, else `UNKNOWN_TOOL`."""
        if tool in self._tools or policy.name == tool:
            return tool
        return UNKNOWN_TOOL

    def learn(self, tool: str) -> bool:
        """Note that `tool` exists; False when the bound on learned names is reached."""
        if tool in self._tools:
            return True
        if len(self._tools) >= MAX_TOOL_NAMES:
            return False
        self._tools.add(tool)  # a set add: safe without a lock under the GIL
        return True

    # -- per call -----------------------------------------------------------------------------

    def begin(self, tool: str, key: object, policy: Policy, source: str = "sep") -> Observation:
        """Start observing one keyed call (only when `listening()`)."""
        return Observation(self, tool, key, policy, source)

    def timed(self, operation: str, op: Awaitable[T]) -> Awaitable[T]:
        """`op` itself when no metrics are recorded (no extra frame), else `op` timed."""
        if self.durations is None:
            return op
        return self._timed(operation, op)

    async def _timed(self, operation: str, op: Awaitable[T]) -> T:
        start = time.perf_counter()
        attributes = self._operations.get(operation)
        if attributes is None:  # a handful of operations: one dict each, not one per call
            attributes = {STORE_OPERATION: operation, STORE_NAME: self.store_name}
            self._operations[operation] = attributes
        try:
            return await op
        except BaseException as exc:
            attributes = {**attributes, "error.type": type(exc).__qualname__}
            raise
        finally:
            if self.durations is not None:
                self.durations.record(time.perf_counter() - start, attributes)


class Observation:
    """One keyed call being observed: its span (current while it runs) and its ending."""

    __slots__ = ("_token", "executing", "label", "source", "span", "telemetry", "tool")

    def __init__(
        self, telemetry: Telemetry, tool: str, key: object, policy: Policy, source: str = "sep"
    ) -> None:
        self.telemetry = telemetry
        self.source = source
        self.tool = tool
        self.label = telemetry.tool_label(tool, policy)  # what is exported: never client text
        self.executing = False  # set when the tool starts: the execution then ends this
        self.span: Span | None = None
        self._token: Any = None
        tracer = telemetry.tracer
        if tracer is None:
            return
        from opentelemetry import context, trace  # loaded already: the tracer came from it

        try:
            self.span = span = tracer.start_span(
                f"idemtools {self.label}",
                kind=trace.SpanKind.INTERNAL,
                attributes={
                    TOOL: self.label,
                    KEY_DIGEST: telemetry.digest(key),
                    KEY_SOURCE: source,
                },
            )
            self._token = context.attach(trace.set_span_in_context(span))
        except Exception:  # a broken SDK or processor must not fail the call
            log.exception("could not start the idemtools span for tool=%s", self.label)
            self.span = None

    def detach(self) -> None:
        """Make the span's parent current again (in the task that began the observation)."""
        if self._token is not None:
            from opentelemetry import context

            context.detach(self._token)
            self._token = None

    def abandon(self, exc: BaseException) -> None:
        """The call ended without an answer (cancelled before its tool ran)."""
        if self.span is not None:
            from opentelemetry.trace import StatusCode

            try:
                self.span.set_attribute("error.type", type(exc).__qualname__)
                self.span.set_status(StatusCode.ERROR, "cancelled before an answer")
                self.span.end()
            except Exception:
                log.exception("could not end the idemtools span for tool=%s", self.label)

    async def end(self, outcome: Outcome) -> None:
        """Classify the answer, end the span and count it."""
        kind, refusal = outcome_kind(outcome, executed=self.executing)
        telemetry = self.telemetry
        renamed = False
        if self.label != self.tool and (
            (kind == "executed" and outcome.final) or kind == "replayed"
        ):
            # It exists after all: it ran to a recorded outcome, or a record of it was replayed.
            renamed = telemetry.learn(self.tool)
            if renamed:
                self.label = self.tool
        attributes = {OUTCOME: kind, TOOL: self.label, KEY_SOURCE: self.source}
        if refusal is not None:
            attributes[REFUSAL] = refusal
        try:  # a broken SDK, processor or reader must not change the answer
            if telemetry.calls is not None:
                telemetry.calls.add(1, attributes)
            if self.span is not None:
                if renamed:
                    self.span.update_name(f"idemtools {self.label}")
                    self.span.set_attribute(TOOL, self.label)
                self.span.set_attribute(OUTCOME, kind)
                if refusal is not None:
                    self.span.set_attribute(REFUSAL, refusal)
                self.span.end()  # last: span processors run here
        except Exception:
            log.exception("could not record telemetry for tool=%s outcome=%s", self.label, kind)


def outcome_kind(outcome: Outcome, *, executed: bool) -> tuple[OutcomeKind, str | None]:
    """What a keyed call came to, and its refusal's `error.data.type` (None if none).

    `executed`: the tool ran for this call (its answer may still be an error or a refusal,
    e.g. a transaction that did not commit). Shared by every observer, so that a span and the
    `on_outcome` hook never disagree about a call.
    """
    refusal = _refusal(outcome)
    if executed:
        return "executed", refusal
    if outcome.replayed:
        return "replayed", refusal
    if refusal == _CONFLICT:
        return "conflict", refusal
    if refusal == _IN_PROGRESS:
        return "in_progress", refusal
    return "refused", refusal


def _refusal(outcome: Outcome) -> str | None:
    """The `error.data.type` of an idemtools refusal, else None."""
    error = outcome.error
    if error is None:
        return None
    data = error.get("data")
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) and kind.startswith("idempotency_") else None
