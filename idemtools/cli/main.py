"""The `idemtools` command's parser and dispatch (see the package)."""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio

from ..conformance import cli as conformance_cli
from ..docs import (
    DocsError,
    SpecError,
    describe,
    load_server,
    parse_spec,
    render_json,
    render_markdown,
)
from ..proxy import cli as proxy_cli

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
    proxy_cli.add_parser(commands)
    _add_keys_parser(commands)
    return parser


def _add_keys_parser(commands: Any) -> None:
    keys = commands.add_parser(
        "keys",
        help="show or release one idempotency record (operators)",
        description=(
            "Show one idempotency record (state, owner, age, expiry; the outcome only with "
            "--outcome), or release a key whose tool is not running any more, fenced by its "
            "owner token. STORE_URL is what the server's store was built from "
            "(idemtools.stores.from_url), e.g. sqlite:///var/lib/app/idem.db or "
            "redis://host:6379/0?prefix=app:."
        ),
    )
    actions = keys.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, text in (
        ("show", "print the record of one key"),
        ("release", "free one key (in progress or lapsed; completed only with --force)"),
    ):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("store_url", metavar="STORE_URL")
        action.add_argument("--key", required=True, help="the idempotencyKey, exactly as sent")
        action.add_argument(
            "--scope",
            required=True,
            help=(
                "the scope hash from the server's log (scope=<64 hex>), or shared, or local "
                "(this OS user on this host), or the scope value as JSON, e.g. "
                '\'["sub", "https://issuer.example", "alice"]\''
            ),
        )
        if name == "show":
            action.add_argument(
                "--outcome", action="store_true", help="also print the recorded outcome"
            )
            action.add_argument("--json", action="store_true", help="print JSON")
        else:
            action.add_argument(
                "--owner", help="release only if the key is still held by this owner token"
            )
            action.add_argument(
                "--force",
                action="store_true",
                help="also delete a completed record (its next retry runs the tool again)",
            )


def _keys_main(args: argparse.Namespace) -> int:
    from .. import stores
    from . import keys

    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(message)s")
    try:
        scope = keys.scope_hash(args.scope)
        store = stores.from_url(args.store_url)
    except (keys.KeysError, ValueError) as exc:
        print(f"idemtools: error: {exc}", file=sys.stderr)
        return 2
    try:
        return anyio.run(_keys_run, store, scope, args)
    except keys.KeysError as exc:
        print(f"idemtools: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # the store's own failure: one line, no traceback
        print(f"idemtools: error: the store failed: {exc}", file=sys.stderr)
        return 1


async def _keys_run(store: Any, scope: str, args: argparse.Namespace) -> int:
    from . import keys

    try:
        if args.action == "show":
            record = await store.get(scope, args.key)
            if record is None:
                print(f"no live record for this key in scope {scope}")
                return 1
            shown = keys.describe(
                record, key=args.key, scope=scope, outcome=args.outcome, now=time.time()
            )
            if args.json:
                print(json.dumps(shown, indent=2, ensure_ascii=False))
            else:
                for name, value in shown.items():
                    if name == "outcome":
                        value = json.dumps(value, ensure_ascii=False)
                    elif name == "outcome_bytes" and value is not None and not args.outcome:
                        value = f"{value} (content not shown; pass --outcome)"
                    print(f"{name}: {'-' if value is None else value}")
            return 0
        result = await keys.release(store, scope, args.key, owner=args.owner, force=args.force)
        if not result.released:
            print("not released: the record changed meanwhile (see idemtools keys show)")
            return 1
        print(f"released ({result.state}, owner {result.owner})")
        if result.state == "lapsed":
            print("the next retry of this key runs the tool again")
        return 0
    finally:
        await store.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    if args.command == "conformance":
        return conformance_cli.main(args)
    if args.command == "keys":
        return _keys_main(args)
    if args.command == "proxy":
        return proxy_cli.main(args)
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
