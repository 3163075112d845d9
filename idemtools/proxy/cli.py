"""`idemtools proxy`: argparse wiring and exit codes (imports the proxy only when it runs)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

__all__ = ["add_parser", "main"]

EPILOG = """\
stdio:  idemtools proxy [options] -- COMMAND [ARGS...]
        The proxy is the host's stdio server; COMMAND is started as its child and relayed.
HTTP:   idemtools proxy --upstream URL --listen HOST:PORT [options]

Every keyed tools/call (params.idempotencyKey) is decided by the idemtools engine: run once
(forwarded upstream without the key, unless --forward-key), replayed, or refused; everything
else passes through unchanged. An upstream lost mid-call is that call's outcome, replayed as
the JSON-RPC error idempotency_outcome_unknown. Exit status: the child's own when it exits,
0 when the host closes stdin, 2 for a usage or configuration error. See docs/proxy.md.
"""


def add_parser(commands: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(
        "proxy",
        help="put SEP-3182 idempotency in front of any MCP server, unchanged",
        description=(
            "Put SEP-3182 idempotency in front of an unmodified MCP server in any language: "
            "advertise capabilities.tools.idempotency and decide every keyed tools/call "
            "with the idemtools engine and store."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="FILE", help="TOML: default policy, per-tool rules")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="idempotency store (default memory://; e.g. "
        "sqlite:///var/lib/proxy.db, redis://127.0.0.1:6379/0)",
    )
    parser.add_argument(
        "--retention", metavar="DURATION", help="default retention: seconds or 90s/15m/24h/7d"
    )
    parser.add_argument(
        "--scope",
        metavar="NAME",
        help="default scope: subject (default: local user on stdio, JWT subject on HTTP), "
        "local, shared, token-hash (HTTP), client",
    )
    parser.add_argument(
        "--forward-key",
        action="store_true",
        default=None,
        help="forward idempotencyKey to the upstream too (default: stripped)",
    )
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    parser.add_argument(
        "upstream_command", nargs="*", metavar="-- COMMAND", help="the stdio upstream"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the proxy for parsed arguments; returns the exit code."""
    from .config import ConfigError, ProxyConfig, duration, load
    from .stdio import serve_stdio

    logging.basicConfig(
        stream=sys.stderr, level=str(args.log_level).upper(), format="idemtools proxy: %(message)s"
    )
    command = list(args.upstream_command)
    if command and command[0] == "--":
        command = command[1:]
    try:
        config = load(args.config) if args.config else ProxyConfig()
        config = config.with_overrides(
            store=args.store,
            retention=duration(args.retention, "--retention") if args.retention else None,
            scope=args.scope,
            forward_key=args.forward_key,
        )
    except (ConfigError, ValueError) as exc:
        print(f"idemtools proxy: error: {exc}", file=sys.stderr)
        return 2
    if not command:
        print("idemtools proxy: error: no upstream: -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve_stdio(command, config))
    except ValueError as exc:  # a store URL from_url refuses
        print(f"idemtools proxy: error: {exc}", file=sys.stderr)
        return 2
