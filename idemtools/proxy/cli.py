"""`idemtools proxy`: argparse wiring and exit codes (imports the proxy only when it runs)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any
from urllib.parse import urlsplit

__all__ = ["add_parser", "main"]

EPILOG = """\
stdio:  idemtools proxy [options] -- COMMAND [ARGS...]
        The proxy is the host's stdio server; COMMAND is started as its child and relayed.
HTTP:   idemtools proxy --upstream URL --listen HOST:PORT [options]
        Off loopback also --allowed-hosts (and --allowed-origins for browsers); with
        --issuer also --jwks-url and --audience.

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
        help="idempotency store (default: on stdio a SQLite file per upstream entry point in the "
        "user's state directory, on HTTP memory://; e.g. sqlite:///var/lib/proxy.db, "
        "redis://127.0.0.1:6379/0)",
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
    http = parser.add_argument_group("Streamable HTTP")
    http.add_argument("--upstream", metavar="URL", help="the upstream's MCP endpoint URL")
    http.add_argument("--listen", metavar="HOST:PORT", help="where the proxy serves HTTP")
    http.add_argument("--issuer", metavar="URL", help="verify bearer JWTs from this issuer")
    http.add_argument("--jwks-url", metavar="URL", help="the issuer's JWKS (https:// or file://)")
    http.add_argument(
        "--audience", metavar="AUD", help="the audience the JWTs must carry (required by --issuer)"
    )
    http.add_argument(
        "--allowed-hosts",
        metavar="HOSTS",
        help="comma-separated Host values served, e.g. mcp.example.com,mcp.example.com:8443 "
        "(NAME:* any port, '*' anything); required when --listen is not a loopback address; "
        "other Hosts get HTTP 403 (DNS-rebinding protection)",
    )
    http.add_argument(
        "--allowed-origins",
        metavar="ORIGINS",
        help="comma-separated Origin values served, e.g. https://app.example.com ('*' "
        "anything); a request without Origin is served; default: the loopback origins when "
        "--listen is loopback, else none",
    )
    http.add_argument(
        "--confirm-credential",
        nargs="?",
        type=float,
        const=30.0,
        default=None,
        metavar="SECONDS",
        help="token-hash: before a keyed call (so before every replay) confirm the caller's "
        "credential with the upstream (an authenticated ping; HTTP 401/403 refuses), an "
        "accepted one cached SECONDS (default 30)",
    )
    docs = parser.add_argument_group(
        "Retention page",
        "--docs prints the idemtools docs page of the proxied server instead of serving: the "
        "upstream's tools/list (COMMAND is started, or --upstream URL asked, and left) with "
        "the policy each tool gets from --config and the flags above.",
    )
    docs.add_argument("--docs", action="store_true", help="print the retention page and exit")
    docs.add_argument(
        "--format", choices=("markdown", "json"), default="markdown", help="default: markdown"
    )
    docs.add_argument("-o", "--output", metavar="FILE", help="write the page to FILE")
    docs.add_argument(
        "--name", help="the server's name on the page (default: the upstream's serverInfo.name)"
    )
    docs.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="HTTP header for listing the upstream's tools (e.g. authorization), repeatable",
    )
    parser.add_argument("--log-level", default="WARNING", help="stderr log level (default WARNING)")
    parser.add_argument(
        "upstream_command", nargs="*", metavar="-- COMMAND", help="the stdio upstream"
    )
    return parser


def main(args: argparse.Namespace) -> int:
    """Run the proxy for parsed arguments; returns the exit code."""
    from .config import ConfigError, ProxyConfig, duration, load
    from .guard import split_list

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
            allowed_hosts=split_list(args.allowed_hosts),
            allowed_origins=split_list(args.allowed_origins),
        )
    except (ConfigError, ValueError) as exc:
        print(f"idemtools proxy: error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.docs:
            return _docs(args, command, config)
        if args.upstream is not None or args.listen is not None:
            return _http(args, command, config)
        if not command:
            print("idemtools proxy: error: no upstream: -- COMMAND [ARGS...]", file=sys.stderr)
            return 2
        if args.issuer or args.jwks_url or args.allowed_hosts or args.allowed_origins:
            print(
                "idemtools proxy: error: --issuer/--jwks-url/--allowed-hosts/--allowed-origins "
                "are for HTTP",
                file=sys.stderr,
            )
            return 2
        if _ruled(config):
            print(
                "idemtools proxy: error: authorize rules need a bearer JWT the proxy verifies: "
                "HTTP with --issuer/--jwks-url/--audience (on stdio every call of a ruled tool "
                "would be refused)",
                file=sys.stderr,
            )
            return 2
        from .stdio import serve_stdio

        return asyncio.run(serve_stdio(command, config))
    except ValueError as exc:  # a store URL from_url refuses, a malformed --upstream
        print(f"idemtools proxy: error: {exc}", file=sys.stderr)
        return 2


def _docs(args: argparse.Namespace, command: list[str], config: Any) -> int:
    from ..docs import render_json, render_markdown
    from .docs import UpstreamError, describe_proxy, tools_over_http, tools_over_stdio

    if bool(command) == bool(args.upstream) or args.listen:
        print(
            "idemtools proxy: error: --docs takes -- COMMAND or --upstream URL (no --listen)",
            file=sys.stderr,
        )
        return 2
    headers = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep:
            print(f"idemtools proxy: error: --header {header!r}: NAME:VALUE", file=sys.stderr)
            return 2
        headers[name.strip()] = value.strip()

    async def page() -> str:
        if command:
            listing = await tools_over_stdio(command)
        else:
            listing = await tools_over_http(args.upstream, headers)
        transport = "stdio" if command else "Streamable HTTP"
        name = args.name or listing.name or _bare(command, args.upstream)
        doc = await describe_proxy(config, listing.tools, server=name, transport=transport)
        return render_json(doc) if args.format == "json" else render_markdown(doc)

    try:
        text = asyncio.run(page())
    except UpstreamError as exc:
        print(f"idemtools proxy: error: {exc}", file=sys.stderr)
        return 1
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _bare(command: list[str], upstream: str | None) -> str:
    """A title without paths or queries, for an upstream that gives itself no name."""
    if command:
        return os.path.basename(command[-1]) or os.path.basename(command[0])
    parts = urlsplit(upstream or "")
    return parts.netloc + parts.path


def _ruled(config: Any) -> bool:
    return any(policy.authorize is not None for _, policy in config.policies())


def _guard(listen: str, config: Any) -> Any:
    """The Host/Origin guard for `listen`, or None when a non-loopback address has none."""
    from .guard import HostGuard, is_loopback, loopback_guard

    host = listen.rpartition(":")[0] or "127.0.0.1"
    if is_loopback(host):
        return loopback_guard(config.allowed_hosts, config.allowed_origins)
    if not config.allowed_hosts:
        return None
    return HostGuard(config.allowed_hosts, config.allowed_origins)


def _http(args: argparse.Namespace, command: list[str], config: Any) -> int:
    from .http import serve_http

    if command or not (args.upstream and args.listen) or ":" not in args.listen:
        print(
            "idemtools proxy: error: HTTP takes --upstream URL and --listen HOST:PORT, "
            "and no COMMAND",
            file=sys.stderr,
        )
        return 2
    guard = _guard(args.listen, config)
    if guard is None:
        print(
            f"idemtools proxy: error: --listen {args.listen} is not a loopback address: name "
            "the Host values clients reach the proxy by with --allowed-hosts (or '*' to accept "
            "any, e.g. behind a gateway that checks it) and the browser origins with "
            "--allowed-origins (DNS-rebinding protection; docs/proxy.md)",
            file=sys.stderr,
        )
        return 2
    verifier = None
    if args.issuer or args.jwks_url or args.audience:
        if not (args.issuer and args.jwks_url and args.audience):
            print(
                "idemtools proxy: error: --issuer needs --jwks-url and --audience (the "
                "audience this proxy's tokens carry: a token minted for another service must "
                "never replay here)",
                file=sys.stderr,
            )
            return 2
        from .auth import JwtVerifier

        verifier = JwtVerifier(args.issuer, args.jwks_url, args.audience)
    if verifier is None and _ruled(config):
        print(
            "idemtools proxy: error: authorize rules need a bearer JWT the proxy verifies: "
            "--issuer/--jwks-url/--audience",
            file=sys.stderr,
        )
        return 2
    log = logging.getLogger("idemtools.proxy")
    if args.confirm_credential is not None and args.confirm_credential < 0:
        print("idemtools proxy: error: --confirm-credential SECONDS must be >= 0", file=sys.stderr)
        return 2
    if "token-hash" in config.scope_names and args.confirm_credential is not None:
        log.warning(
            "--scope token-hash with --confirm-credential: a replay needs the upstream to "
            "accept the caller's credential (confirmed at most every %g s)",
            args.confirm_credential,
        )
    elif "token-hash" in config.scope_names:
        log.warning(
            "--scope token-hash: possessing the token authorizes replays, also after the "
            "upstream revoked it (--confirm-credential asks the upstream first); a rotated "
            "token is a new scope (docs/proxy.md, Scope)"
        )
    elif verifier is None and config.scope_names & {"subject", "client"}:
        log.warning(
            "no --issuer/--jwks-url: keyed calls over HTTP are refused "
            "(idempotency_scope_unavailable) unless a tool's scope is token-hash or shared"
        )
    return asyncio.run(
        serve_http(args.upstream, args.listen, config, verifier, args.confirm_credential, guard)
    )
