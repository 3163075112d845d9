"""Run every check against one target, in each protocol era it serves, and build the report.

A run has one overall deadline (`Options.deadline`, shared by every connection it opens) and
stops early when the deadline passes or the target goes away (`Stopped`, carrying the report of
what was decided): a target that hangs on every call costs the deadline, not every check's
timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shlex
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .catalogue import SCENARIOS
from .contract import FIXTURE_TOOLS
from .probe import Fixtures, probe
from .report import Baseline, Report
from .scenario import Context, OpenError, Outcome, Outcomes, Scenario, WireOpener, record
from .unfixtured import OMITTABLE
from .wire import (
    DEFAULT_MAX_MESSAGE,
    LEGACY,
    MODERN,
    Budget,
    DeadlineReached,
    HttpWire,
    StdioWire,
    TargetGone,
    Wire,
    WireError,
)

__all__ = ["DEFAULT_DEADLINE", "ERAS", "Options", "Stopped", "TargetError", "run"]

ERAS = (LEGACY, MODERN)
# A healthy run takes 10-35 s (both eras, the default --slow-ms); a server that needs 300 s is
# hanging, not slow. The waits a run makes on purpose (half of --retention) come on top.
DEFAULT_DEADLINE = 300.0


class TargetError(Exception):
    """The target cannot be reached, serves no requested era, or cannot list its tools
    (exit 2)."""


# What a target without the fixture tools is told would run the checks that need them.
ADD_FIXTURES = (
    "the fixture tools (docs/conformance.md, the fixture contract: in Python "
    "idemtools.conformance.add_fixture_tools(server); in TypeScript the snippet there, "
    "as in tests/conformance/ts_server/server.mjs)"
)


class Stopped(Exception):
    """The run stopped before every check ran: its deadline passed, or the target went away.
    `report` holds what was decided; the checks that did not run are `skip` results."""

    def __init__(self, report: Report, reason: str, not_run: int) -> None:
        super().__init__(reason)
        self.report = report
        self.reason = reason
        self.not_run = not_run


@dataclass
class Options:
    """One run. `target` is a URL (str) or a command line (list) that starts a stdio server."""

    target: str | Sequence[str]
    headers: Mapping[str, str] = field(default_factory=dict)
    second_headers: Mapping[str, str] | None = None
    also: str | None = None
    eras: Sequence[str] = ERAS
    era_required: bool = False
    baseline: Baseline = field(default_factory=Baseline)
    slow_ms: int = 1500
    timeout: float = 30.0
    retention: float | None = None
    deadline: float | None = None  # None: DEFAULT_DEADLINE, plus half of `retention` per era
    max_message: int = DEFAULT_MAX_MESSAGE
    tool: tuple[str, dict[str, Any]] | None = None  # --tool NAME --arguments JSON
    families: frozenset[str] = frozenset()  # only these check families (empty: every check)

    def run_deadline(self) -> float:
        if self.deadline is not None:
            return self.deadline
        return DEFAULT_DEADLINE + (self.retention or 0) / 2 * len(self.eras)

    @property
    def is_http(self) -> bool:
        return isinstance(self.target, str)

    def describe(self) -> str:
        return self.target if isinstance(self.target, str) else shlex.join(self.target)


def _opener(
    options: Options, era: str, budget: Budget, *, url: str | None = None, second: bool = False
) -> WireOpener:
    async def open_() -> Wire:
        wire: HttpWire | StdioWire
        if isinstance(options.target, str) or url is not None:
            headers = dict(options.headers)
            if second and options.second_headers is not None:
                lowered = {k.lower() for k in options.second_headers}
                headers = {k: v for k, v in headers.items() if k.lower() not in lowered}
                headers.update(options.second_headers)
            wire = HttpWire(
                url or str(options.target),
                era,
                options.timeout,
                headers,
                budget=budget,
                max_message=options.max_message,
            )
        else:
            wire = StdioWire(
                options.target, era, options.timeout, budget, max_message=options.max_message
            )
        await wire.start()
        try:
            await wire.open()
        except BaseException:
            await wire.aclose()
            raise
        return wire

    return open_


async def _probe(wire: Wire, run_id: str, tool: str | None) -> Fixtures:
    found = await probe(wire, run_id)
    if found is None:
        raise TargetError(f"tools/list failed in {wire.era}: the target lists no tools")
    if tool is not None and not found.required_ok and tool not in found.names:
        raise TargetError(f"--tool {tool}: the target does not list it in {wire.era}")
    return found


def _gate(scenario: Scenario, fixtures: Fixtures) -> Outcome | None:
    """The outcome of every check of a scenario whose fixture tools are broken or absent, or
    None when it can run."""
    broken = fixtures.broken_of(scenario.fixtures)
    if broken:
        why = "; ".join(f"{name}: {fixtures.broken[name]}" for name in broken)
        return ("fixture-error", f"a fixture tool breaks the contract: {why}")
    absent = fixtures.absent(scenario.fixtures)
    if absent:
        return (
            "blocked",
            f"needs the fixture tool{'s' if len(absent) > 1 else ''} {', '.join(absent)}, "
            "which the target does not list",
            {"enable": ADD_FIXTURES},
        )
    return None


async def run(options: Options) -> Report:
    """Connect in each era, check the fixtures, run every scenario; never raises for a failing
    check, only TargetError when there is nothing to check and Stopped when the run ended
    early."""
    run_id = uuid.uuid4().hex[:8]
    budget = Budget(options.run_deadline())
    served: list[tuple[str, Wire]] = []
    refusals: list[str] = []
    with _quiet_leftovers():
        try:
            for era in options.eras:
                try:
                    wire = await _opener(options, era, budget)()
                except WireError as exc:
                    if options.era_required or isinstance(exc, DeadlineReached):
                        raise TargetError(f"{options.describe()}: {exc}") from None
                    refusals.append(f"{era}: {exc}")
                    continue
                served.append((era, wire))
            if not served:
                raise TargetError(
                    f"{options.describe()}: no protocol era served ({'; '.join(refusals)})"
                )
            found: dict[str, Fixtures] = {}
            tool = options.tool[0] if options.tool else None
            for era, wire in served:
                try:
                    found[era] = await _probe(wire, run_id, tool)
                except WireError as exc:
                    raise TargetError(f"{options.describe()}: {exc}") from None
            report = Report(
                target=options.describe(),
                eras=[era for era, _ in served],
                baseline=options.baseline,
            )
            for era, _wire in served:
                for text in found[era].notes:
                    report.note(text)
                if not found[era].required_ok and not found[era].broken:
                    report.note(
                        f"{era}: the target lists no fixture tools"
                        if not found[era].listed
                        else f"{era}: the target lacks fixture tools "
                        + ", ".join(found[era].absent(FIXTURE_TOOLS))
                    )
            if options.tool is not None and all(f.required_ok for f in found.values()):
                report.note("--tool was not used: the fixture tools are there")
            stop: str | None = None
            for era, wire in served:
                stop = await _run_era(options, era, wire, run_id, report, budget, stop, found[era])
            if stop is not None:
                not_run = sum(1 for r in report.results if r.detail.startswith(_NOT_RUN))
                raise Stopped(report, stop, not_run)
            return report
        finally:
            for _era, wire in served:
                await wire.aclose()


_NOT_RUN = "did not run: "
# A check a stopped run did not reach did not run, and would in a run that is not cut short:
# never "cannot apply here".
_RUN_AGAIN = {"enable": "a run that is not cut short (see why this one stopped)"}


async def _run_era(
    options: Options,
    era: str,
    wire: Wire,
    run_id: str,
    report: Report,
    budget: Budget,
    stop: str | None,
    fixtures: Fixtures,
) -> str | None:
    """Every scenario of one era; returns why the run stopped (then, or before: `stop`)."""
    ctx = Context(era=era, wire=wire, run_id=run_id, slow_ms=options.slow_ms)
    ctx.fixtures_ok = fixtures.required_ok
    ctx.named_tool = options.tool
    if options.is_http and options.second_headers is not None:
        ctx.second_caller = _opener(options, era, budget, second=True)
    elif not options.is_http:
        ctx.second_caller_why_not = (
            "stdio: the authorization boundary is the process's local user; one stdio server "
            "has one caller"
        )
    if options.is_http:
        ctx.reconnect = _opener(options, era, budget)  # the same caller on a new connection
    if options.also is not None:
        ctx.other_instance = _opener(options, era, budget, url=options.also)
    ctx.retention = options.retention  # every era: each keeps its own records
    try:
        for scenario in SCENARIOS:
            if era not in scenario.eras or (
                options.families and scenario.family not in options.families
            ):
                continue
            outcomes: Outcomes
            gated = _gate(scenario, fixtures)
            if stop is not None:
                outcomes = dict.fromkeys(scenario.checks, ("skip", f"{_NOT_RUN}{stop}", _RUN_AGAIN))
            elif gated is not None:
                outcomes = await _dry(scenario, ctx, gated)
            else:
                try:
                    outcomes = await _scenario(scenario.run, ctx, budget)
                except OpenError as exc:
                    raise TargetError(
                        f"{scenario.checks[0]}: cannot open its connection: {exc}"
                    ) from None
                except DeadlineReached as exc:
                    stop = str(exc)
                    outcomes = dict.fromkeys(
                        scenario.checks, ("skip", f"not decided: {exc}", _RUN_AGAIN)
                    )
                except TargetGone as exc:
                    stop = str(exc)
                    outcomes = dict.fromkeys(scenario.checks, ("fail", f"wire failure: {exc}"))
                except WireError as exc:
                    outcomes = dict.fromkeys(scenario.checks, ("fail", f"wire failure: {exc}"))
            for check_id in scenario.checks:
                if check_id not in outcomes and scenario.name in OMITTABLE:
                    continue
                record(report, ctx, check_id, outcomes[check_id])
    finally:
        await ctx.aclose()
    return stop


class _NeedsFixture(WireError):
    """Raised by the dry wire on the first request: the scenario would have called a tool."""


class _DryWire(Wire):
    """A wire that refuses every request: a scenario that decides without calling anything
    (it does not apply to this transport) still says so; any other is gated."""

    def __init__(self, real: Wire) -> None:
        super().__init__(real.era, real.timeout)
        self.opened = real.opened

    async def _exchange(
        self, rid: int, method: str, params: dict[str, Any] | None, text: str
    ) -> dict[str, Any]:
        raise _NeedsFixture(method)

    async def aclose(self) -> None:
        pass


async def _dry(scenario: Scenario, ctx: Context, gated: Outcome) -> Outcomes:
    """The outcomes of a scenario whose fixtures are absent or broken: `gated` for every check,
    unless the scenario decides without a request (a check that cannot apply to this target is
    a skip whatever the fixtures: only what the transport allows is counted)."""
    real, ctx.wire = ctx.wire, _DryWire(ctx.wire)
    try:
        decided = await scenario.run(ctx)
    except WireError:
        decided = {}
    finally:
        ctx.wire = real
    ctx.transcript = []  # a gated check has no exchanges of its own
    out: Outcomes = {}
    for check in scenario.checks:
        outcome = decided.get(check)
        applies = outcome is None or outcome[0] != "skip" or len(outcome) > 2
        out[check] = gated if applies else outcome  # type: ignore[assignment]
    return out


async def _scenario(
    run: Callable[[Context], Awaitable[Outcomes]], ctx: Context, budget: Budget
) -> Outcomes:
    """One scenario within what is left of the run: its requests are bounded by the wire, and
    whatever else it waits for (a retention window, a sleep) by this."""
    left = budget.left()
    if left is not None and left <= 0:
        raise budget.reached("before this check")
    try:
        return await asyncio.wait_for(run(ctx), None if left is None else left + 0.5)
    except asyncio.TimeoutError:
        raise budget.reached("during this check") from None


@contextlib.contextmanager
def _quiet_leftovers() -> Iterator[None]:
    """A scenario that stops waiting for one of two concurrent calls (the in-progress pair)
    leaves the other's WireError unretrieved; the check already reported it, so asyncio's
    "Task exception was never retrieved" is noise. Anything else goes to the default handler."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if isinstance(context.get("exception"), WireError):
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        gc.collect()  # finalize those leftover tasks now, while the handler is ours
        loop.set_exception_handler(previous)
