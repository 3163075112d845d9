"""The `idemtools` command: `idemtools docs module:attribute [-o FILE] [--format markdown|json]`,
and `idemtools conformance TARGET` (the black-box SEP-3182 kit, `idemtools.conformance.cli`,
which has its own exit codes: 0 conformant, 1 a MUST check failed, 2 target unreachable).

Exit codes follow shell habit: 0 done, 2 usage errors (argparse's own code, also for a
reference that is not `module:attribute`), 1 when the server cannot be loaded or documented,
with one line on stderr saying why, never a traceback: it is meant for CI and Makefiles.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

import anyio

from .conformance import cli as conformance_cli
from .docs import (
    DocsError,
    SpecError,
    describe,
    load_server,
    parse_spec,
    render_json,
    render_markdown,
)

__all__ = ["main"]


def _version() -> str:
    try:
        return version("idemtools")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _spec(value: str) -> str:
    """argparse type: a malformed reference is a usage error (exit 2), caught before importing."""
    try:
        parse_spec(value)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value.strip()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="idemtools",
        description="Tools for MCP servers that use idemtools (SEP-3182 request idempotency).",
    )
    parser.add_argument("--version", action="version", version=f"idemtools {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    docs = commands.add_parser(
        "docs",
        help="print the retention documentation of a server",
        description=(
            "Print the idempotency and retention documentation of a server on which "
            "idemtools.install() was called: one row per tool, the store, the errors a "
            "client may see. The current directory is importable, as with `python -m`."
        ),
    )
    docs.add_argument(
        "server", type=_spec, metavar="module:attribute", help="e.g. myapp.server:server"
    )
    docs.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    docs.add_argument(
        "--format", choices=("markdown", "json"), default="markdown", help="default: markdown"
    )
    conformance_cli.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    if args.command == "conformance":
        return conformance_cli.main(args)
    # Console scripts, unlike `python -m`, do not put the current directory on sys.path;
    # a user documenting `myapp.server:server` from the project root expects it to import.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        server = load_server(args.server)
        doc = anyio.run(functools.partial(describe, server, source=args.server))
    except DocsError as exc:
        print(f"idemtools: error: {exc}", file=sys.stderr)
        return 1
    text = render_json(doc) if args.format == "json" else render_markdown(doc)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        with open(args.output, "w", encoding="utf-8", newline="\n") as out:
            out.write(text)
    except OSError as exc:
        print(f"idemtools: error: cannot write {args.output}: {exc.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - `python -m idemtools.cli`
    sys.exit(main())
