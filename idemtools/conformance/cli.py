"""`idemtools conformance`: the command line of the kit (argparse wiring and exit codes)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from .catalogue import CHECKS, SCENARIOS
from .families import FAMILIES
from .report import Baseline, BaselineError
from .runner import DEFAULT_DEADLINE, ERAS, Options, Stopped, TargetError, run
from .wire import DEFAULT_MAX_MESSAGE

__all__ = ["add_parser", "main"]

EPILOG = """\
TARGET is a streamable HTTP URL (http://127.0.0.1:8000/mcp) or, after `--`, the command line of
a stdio server (idemtools conformance -- node server.js). With the fixture tools
(docs/conformance.md) every check runs; without them (a server you did not write) the checks
that need none run, the rest are BLOCKED, and the run is incomplete; --tool NAME --arguments
JSON adds replay equality on a tool of yours. Exit status: 0 every MUST check that ran passed
(after the baseline), 1 a MUST check failed or was blocked by a failure, a baseline entry is
stale, or (with --require-all) a MUST check did not run, 2 the target cannot be reached, serves
no requested era, or a fixture tool breaks the contract. A run that stops early (--deadline
passed, or the target went away) prints what it decided and exits 1 if a MUST check had failed
by then, else 2.
"""


def _header(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {value!r}")
    return name.strip(), rest.strip()


def _positive(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {value!r}")
    return seconds


def _arguments(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}: {exc}") from None
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {value!r}")
    return parsed


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "conformance",
        help="check any MCP server against SEP-3182, black-box",
        description=(
            "Black-box SEP-3182 conformance checks for any MCP server, in any language: one "
            "line per check (id, level, pass/fail/skip, why) and a summary."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")
    parser.add_argument(
        "--header",
        action="append",
        type=_header,
        default=[],
        metavar="'Name: value'",
        help="HTTP header for every request (repeatable), e.g. 'Authorization: Bearer ...'",
    )
    parser.add_argument(
        "--second-header",
        action="append",
        type=_header,
        default=None,
        metavar="'Name: value'",
        help="a second authorized caller: its headers replace same-named --header values "
        "(repeatable); enables sep-3182-scope-per-caller",
    )
    parser.add_argument(
        "--also",
        metavar="URL",
        help="a second instance of the same deployment; enables sep-3182-shared-store",
    )
    parser.add_argument(
        "--era", choices=(*ERAS, "all"), default="all", help="protocol era(s); default: all served"
    )
    parser.add_argument(
        "--baseline",
        metavar="FILE",
        help="expected failures: one check id per line, or the official suite's "
        "expected-failures YAML (server: [...])",
    )
    parser.add_argument(
        "--require-all",
        action="store_true",
        help="a MUST check that did not run (an option or a fixture missing) fails the run",
    )
    parser.add_argument(
        "--tool",
        metavar="NAME",
        help="where the fixture tools are absent: a tool of the target that is safe to run "
        "three times; the kit sends it three calls: one with a key and its retry under that key "
        "(to judge the replay), and one whose key is the number 42 (a server should refuse it "
        "without running the tool)",
    )
    parser.add_argument(
        "--arguments",
        type=_arguments,
        metavar="JSON",
        help="the arguments for --tool, a JSON object sent exactly as given (default {})",
    )
    parser.add_argument(
        "--retention",
        type=float,
        metavar="SECONDS",
        help="the retention window the server documents (short ones only: the kit waits); "
        "enables sep-3182-retention-window",
    )
    parser.add_argument(
        "--slow-ms",
        type=int,
        default=1500,
        metavar="MS",
        help="how long the in-progress original runs (default 1500); the late-duplicate "
        "check's original runs three times as long",
    )
    parser.add_argument(
        "--timeout",
        type=_positive,
        default=30.0,
        metavar="SECONDS",
        help="for each whole answer, sending included (default 30)",
    )
    parser.add_argument(
        "--deadline",
        type=_positive,
        metavar="SECONDS",
        help=f"for the whole run: then it stops and reports (default {DEFAULT_DEADLINE:g}, plus "
        "half of --retention per era)",
    )
    parser.add_argument(
        "--max-message-bytes",
        type=int,
        default=DEFAULT_MAX_MESSAGE,
        metavar="BYTES",
        help="the largest stdio line, HTTP body or SSE stream the kit reads (default "
        f"{DEFAULT_MAX_MESSAGE}, 16 MiB)",
    )
    parser.add_argument(
        "--family",
        action="append",
        choices=tuple(FAMILIES),
        default=[],
        metavar="NAME",
        help="run only this check family (repeatable; one of: " + ", ".join(FAMILIES) + "): to "
        "study one rule; a partial run is no conformance verdict",
    )
    parser.add_argument("target", nargs="+", metavar="TARGET", help="URL, or -- COMMAND...")
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the kit for parsed arguments; returns the exit code."""
    target: str | list[str] = list(args.target)
    if target and target[0] == "--":
        target = target[1:]
    if len(target) == 1 and target[0].startswith(("http://", "https://")):
        target = target[0]
    if not target:
        print("idemtools conformance: error: no TARGET", file=sys.stderr)
        return 2
    if args.also is not None and not isinstance(target, str):
        print("idemtools conformance: error: --also needs an HTTP TARGET", file=sys.stderr)
        return 2
    if args.arguments is not None and args.tool is None:
        print("idemtools conformance: error: --arguments needs --tool NAME", file=sys.stderr)
        return 2
    if args.slow_ms < 50:
        print("idemtools conformance: error: --slow-ms must be at least 50", file=sys.stderr)
        return 2
    if args.max_message_bytes < 1024:
        print(
            "idemtools conformance: error: --max-message-bytes must be at least 1024",
            file=sys.stderr,
        )
        return 2
    try:
        scenarios = {s.name: s.checks for s in SCENARIOS}
        baseline = Baseline.load(args.baseline, CHECKS, scenarios) if args.baseline else Baseline()
    except BaselineError as exc:
        print(f"idemtools conformance: error: baseline {exc}", file=sys.stderr)
        return 2
    options = Options(
        target=target,
        headers=dict(args.header),
        second_headers=dict(args.second_header) if args.second_header is not None else None,
        also=args.also,
        eras=ERAS if args.era == "all" else (args.era,),
        era_required=args.era != "all",
        baseline=baseline,
        slow_ms=args.slow_ms,
        timeout=args.timeout,
        retention=args.retention,
        deadline=args.deadline,
        max_message=args.max_message_bytes,
        tool=(args.tool, args.arguments or {}) if args.tool is not None else None,
        families=frozenset(args.family),
    )
    if args.family:
        print(
            f"idemtools conformance: only the {', '.join(args.family)} check families run "
            "(--family): a partial run, not a conformance verdict",
            file=sys.stderr,
        )
    stopped: Stopped | None = None
    try:
        report = asyncio.run(run(options))
    except TargetError as exc:
        print(f"idemtools conformance: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:
        stopped, report = exc, exc.report
    report.require_all = args.require_all
    code = report.exit_code()
    lines = report.lines()
    if stopped is not None:
        code = 1 if code == 1 else 2  # a MUST failure stands; otherwise the run is inconclusive
        if lines and lines[-1] == "conformant":
            lines[-1] = "incomplete"
    if args.family and lines and lines[-1] == "conformant":
        lines[-1] = "partial: only the families " + ", ".join(args.family) + " ran (--family)"
    for line in lines:
        print(line)
    if args.json:
        data = report.as_json()
        if stopped is not None:  # added fields only: a reader that ignores unknown ones reads it
            data["stopped"] = {"reason": stopped.reason, "not_run": stopped.not_run}
            data["summary"]["exit_code"] = code
        if args.family:  # added field: a partial run says which families it ran
            data["families"] = sorted(args.family)
        try:
            with open(args.json, "w", encoding="utf-8", newline="\n") as out:
                out.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            print(
                f"idemtools conformance: error: cannot write {args.json}: {exc.strerror}",
                file=sys.stderr,
            )
            return 2
    if stopped is not None:
        print(
            f"idemtools conformance: error: the run stopped early: {stopped.reason}; "
            f"{stopped.not_run} checks did not run",
            file=sys.stderr,
        )
    return code
