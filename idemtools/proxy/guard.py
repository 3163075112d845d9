"""Host and Origin validation of the HTTP proxy: the MCP transport's DNS-rebinding rule.

A browser page on `evil.example.com` whose name is made to resolve to 127.0.0.1 can reach a
local server; its requests then carry `Host: evil.example.com` (and its `Origin`). The MCP SDK
servers refuse such requests, and the proxy replaces the upstream's own `Host` by the
upstream's address, so the proxy must refuse them itself, before anything reaches the upstream.

Patterns are matched as the SDKs match them: an exact value (`localhost:8080`), a name with any
port (`localhost:*`), or `*` for anything. Hosts are compared case-insensitively (DNS names
are). A request without `Origin` is allowed (non-browser clients send none); one without
`Host` is refused. Listening on a loopback address, the defaults are the loopback names with
any port, and `http://` origins of them; on any other address there is no default: the
operator names the hosts (`cli` refuses to start otherwise).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["HostGuard", "is_loopback", "loopback_guard", "split_list"]

_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether a `--listen` host only accepts connections from this machine."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Patterns from a comma-separated flag or a TOML list (blank entries dropped)."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    return tuple(item.strip() for item in items if item.strip())


def _matches(value: str, patterns: tuple[str, ...], *, fold: bool) -> bool:
    if fold:
        value = value.lower()
    for pattern in patterns:
        pattern = pattern.lower() if fold else pattern
        if pattern == "*" or value == pattern:
            return True
        if pattern.endswith(":*") and value.startswith(pattern[:-1]):
            port = value[len(pattern) - 1 :]
            if port.isdigit():
                return True
    return False


@dataclass(frozen=True)
class HostGuard:
    """The `Host` values and `Origin` values the proxy serves (see the module docstring)."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...] = ()

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these headers is refused, or None when it is served."""
        if not host or not _matches(host, self.hosts, fold=True):
            return f"Invalid Host header: {host or '(none)'}"
        if origin and not _matches(origin, self.origins, fold=True):
            return f"Invalid Origin header: {origin}"
        return None


def loopback_guard(hosts: tuple[str, ...] = (), origins: tuple[str, ...] = ()) -> HostGuard:
    """The guard of a proxy listening on a loopback address: what the operator named, else
    the loopback names (bare or with any port) and their `http://` origins."""
    if not hosts:
        hosts = (*_LOOPBACK_NAMES, *(f"{name}:*" for name in _LOOPBACK_NAMES))
    if not origins:
        origins = tuple(f"http://{name}{port}" for name in _LOOPBACK_NAMES for port in ("", ":*"))
    return HostGuard(hosts, origins)
