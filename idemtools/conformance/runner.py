"""Run every check against one target, in each protocol era it serves, and build the report."""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .checks import SCENARIOS, Context, OpenError, WireOpener, record
from .contract import FIXTURE_TOOLS
from .report import Baseline, Report
from .wire import LEGACY, MODERN, HttpWire, StdioWire, Wire, WireError

__all__ = ["ERAS", "Options", "TargetError", "run"]

ERAS = (LEGACY, MODERN)


class TargetError(Exception):
    """The target cannot be reached, serves no requested era, or lacks the fixtures (exit 2)."""


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

    @property
    def is_http(self) -> bool:
        return isinstance(self.target, str)

    def describe(self) -> str:
        return self.target if isinstance(self.target, str) else shlex.join(self.target)


def _opener(
    options: Options, era: str, *, url: str | None = None, second: bool = False
) -> WireOpener:
    async def open_() -> Wire:
        wire: HttpWire | StdioWire
        if isinstance(options.target, str) or url is not None:
            headers = dict(options.headers)
            if second and options.second_headers is not None:
                lowered = {k.lower() for k in options.second_headers}
                headers = {k: v for k, v in headers.items() if k.lower() not in lowered}
                headers.update(options.second_headers)
            wire = HttpWire(url or str(options.target), era, options.timeout, headers)
        else:
            wire = StdioWire(options.target, era, options.timeout)
        await wire.start()
        try:
            await wire.open()
        except BaseException:
            await wire.aclose()
            raise
        return wire

    return open_


async def _check_fixtures(wire: Wire) -> None:
    reply = await wire.request("tools/list", {})
    tools = (reply.get("result") or {}).get("tools")
    if not isinstance(tools, list):
        raise TargetError(f"tools/list failed in {wire.era}: {str(reply.get('error'))[:300]}")
    names = {t.get("name") for t in tools if isinstance(t, dict)}
    missing = [name for name in FIXTURE_TOOLS if name not in names]
    if missing:
        raise TargetError(
            "the target lacks the conformance fixture tools "
            f"{', '.join(missing)} (docs/conformance.md: the fixture contract; Python servers: "
            "idemtools.conformance.add_fixture_tools(server))"
        )


async def run(options: Options) -> Report:
    """Connect in each era, check the fixtures, run every scenario; never raises for a failing
    check, only TargetError when there is nothing to check."""
    run_id = uuid.uuid4().hex[:8]
    served: list[tuple[str, Wire]] = []
    refusals: list[str] = []
    try:
        for era in options.eras:
            try:
                wire = await _opener(options, era)()
            except WireError as exc:
                if options.era_required:
                    raise TargetError(f"{options.describe()}: {exc}") from None
                refusals.append(f"{era}: {exc}")
                continue
            served.append((era, wire))
        if not served:
            raise TargetError(
                f"{options.describe()}: no protocol era served ({'; '.join(refusals)})"
            )
        for _era, wire in served:
            try:
                await _check_fixtures(wire)
            except WireError as exc:
                raise TargetError(f"{options.describe()}: {exc}") from None
        report = Report(
            target=options.describe(), eras=[era for era, _ in served], baseline=options.baseline
        )
        for era, wire in served:
            await _run_era(options, era, wire, run_id, report)
        return report
    finally:
        for _era, wire in served:
            await wire.aclose()


async def _run_era(options: Options, era: str, wire: Wire, run_id: str, report: Report) -> None:
    ctx = Context(era=era, wire=wire, run_id=run_id, slow_ms=options.slow_ms)
    if options.is_http and options.second_headers is not None:
        ctx.second_caller = _opener(options, era, second=True)
    elif not options.is_http:
        ctx.second_caller_why_not = (
            "stdio: the authorization boundary is the process's local user; one stdio server "
            "has one caller"
        )
    if options.is_http:
        ctx.reconnect = _opener(options, era)  # the same caller on a new connection
    if options.also is not None:
        ctx.other_instance = _opener(options, era, url=options.also)
    ctx.retention = options.retention  # every era: each keeps its own records
    try:
        for scenario in SCENARIOS:
            if era not in scenario.eras:
                continue
            try:
                outcomes = await scenario.run(ctx)
            except OpenError as exc:
                raise TargetError(
                    f"{scenario.checks[0]}: cannot open its connection: {exc}"
                ) from None
            except WireError as exc:
                outcomes = dict.fromkeys(scenario.checks, ("fail", f"wire failure: {exc}"))
            for check_id in scenario.checks:
                record(report, ctx, check_id, outcomes[check_id])
    finally:
        await ctx.aclose()
