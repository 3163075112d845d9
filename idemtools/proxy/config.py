"""The proxy's configuration: a default policy, per-tool overrides by name or glob, and options.

    # proxy.toml (every key optional; command-line flags win over the file)
    store = "sqlite:///var/lib/idemtools/proxy.db"
    forward_key = false        # strip idempotencyKey before forwarding (default)
    shutdown_grace = 30        # seconds keyed calls in flight get at shutdown
    allowed_hosts = ["mcp.example.com"]          # HTTP: Host values served (or ["*"])
    allowed_origins = ["https://app.example.com"] # HTTP: browser origins served

    [default]                  # tools no [tools.*] table matches
    retention = "24h"          # seconds, or a number with s, m, h or d
    lease = "60s"
    max_runtime = "1h"         # past it a keyed call is recorded as outcome unknown
    scope = "subject"          # subject | local | shared | token-hash | client
    on_lapse = "rerun"         # rerun | refuse: a retry after the proxy died mid-call

    [tools."charge_*"]         # exact names first, then globs in file order
    retention = "7d"
    on_lapse = "refuse"
    authorize = { scopes = ["payments:write"], claims = { tenant = "acme" } }

`transactional` is not available: the proxy cannot commit an upstream's writes together with
its record. `on_lapse` takes "rerun" or "refuse" only: a reconcile function is Python code,
which a TOML file cannot hold. Unknown keys are refused at start-up rather than ignored: a
misspelt `retension` must not silently leave the default in place.
"""

from __future__ import annotations

import fnmatch
import importlib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..policy import DEFAULT_MAX_RUNTIME, Policy
from .scope import AuthRule, scope_name, scope_named

# Python 3.10 has no tomllib: the `proxy` extra brings tomli, the same parser under its old name.
tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

__all__ = ["ConfigError", "ProxyConfig", "ToolRule", "duration", "load"]


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the file, table and key."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_POLICY_KEYS = {"retention", "lease", "max_runtime", "scope", "on_lapse", "authorize"}
_ON_LAPSE = ("rerun", "refuse")
_TOP_KEYS = {
    "store",
    "forward_key",
    "shutdown_grace",
    "allowed_hosts",
    "allowed_origins",
    "default",
    "tools",
}


def duration(value: object, what: str) -> float:
    """Seconds from a number or a string such as "90s", "15m", "24h", "7d"."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected seconds or a duration like '24h', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    else:
        raise ConfigError(f"{what}: expected seconds or a duration like '24h', got {value!r}")
    if not seconds > 0 or seconds == float("inf"):
        raise ConfigError(f"{what}: must be more than 0 seconds, got {value!r}")
    return seconds


@dataclass(frozen=True)
class ToolRule:
    """A `[tools."pattern"]` table: the policy of the tools whose name matches `pattern`."""

    pattern: str
    policy: Policy
    exact: bool


@dataclass(frozen=True)
class ProxyConfig:
    """Everything the proxy decides a keyed call with; built by `load` and the flags."""

    default: Policy = field(default_factory=lambda: Policy(scope=scope_named("subject")))
    rules: tuple[ToolRule, ...] = ()
    store: str | None = None
    """A store URL; None: the default for the transport (stdio: a SQLite file per upstream
    command in the user's state directory, as a stdio server's; HTTP: `memory://`)."""
    forward_key: bool = False
    shutdown_grace: float = 30.0
    allowed_hosts: tuple[str, ...] = ()
    """HTTP: the `Host` values served (`--allowed-hosts`); empty: the listen address's
    defaults (see `guard`)."""
    allowed_origins: tuple[str, ...] = ()
    """HTTP: the `Origin` values served (`--allowed-origins`)."""

    def policy_for(self, name: str) -> Policy:
        """An exact `[tools.NAME]` first, then the first glob that matches, else the default."""
        rule = self.rule_for(name)
        return self.default if rule is None else rule.policy

    def rule_for(self, name: str) -> ToolRule | None:
        """The `[tools."pattern"]` table that decides `name` (None: the default policy)."""
        for rule in self.rules:
            if rule.exact and rule.pattern == name:
                return rule
        for rule in self.rules:
            if not rule.exact and fnmatch.fnmatchcase(name, rule.pattern):
                return rule
        return None

    def policies(self) -> list[tuple[str, Policy]]:
        """("(default)", policy) then one entry per rule, for docs and the start-up log."""
        return [("(default)", self.default), *((r.pattern, r.policy) for r in self.rules)]

    def with_overrides(
        self,
        *,
        store: str | None = None,
        retention: float | None = None,
        scope: str | None = None,
        forward_key: bool | None = None,
        allowed_hosts: tuple[str, ...] = (),
        allowed_origins: tuple[str, ...] = (),
    ) -> ProxyConfig:
        """The command-line flags: they set the default policy (and keep the rules' own)."""
        default = self.default
        if retention is not None:
            default = replace(default, retention=retention)
        if scope is not None:
            default = replace(default, scope=scope_named(scope))
        return replace(
            self,
            default=default,
            store=store if store is not None else self.store,
            forward_key=forward_key if forward_key is not None else self.forward_key,
            allowed_hosts=allowed_hosts or self.allowed_hosts,
            allowed_origins=allowed_origins or self.allowed_origins,
        )

    @property
    def scope_names(self) -> set[str]:
        return {scope_name(p.scope) for _, p in self.policies()}


def _policy(table: Mapping[str, Any], base: Policy, where: str) -> Policy:
    unknown = set(table) - _POLICY_KEYS
    if "transactional" in unknown:
        raise ConfigError(
            f"{where}: 'transactional' is not available in the proxy (it cannot commit the "
            "upstream's own writes together with the record)"
        )
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    policy = base
    if "retention" in table:
        policy = replace(policy, retention=duration(table["retention"], f"{where}.retention"))
    if "lease" in table:
        policy = replace(policy, lease=duration(table["lease"], f"{where}.lease"))
    if "max_runtime" in table:
        policy = replace(policy, max_runtime=duration(table["max_runtime"], f"{where}.max_runtime"))
    if "scope" in table:
        try:
            policy = replace(policy, scope=scope_named(str(table["scope"])))
        except ValueError as exc:
            raise ConfigError(f"{where}.scope: {exc}") from None
    if "on_lapse" in table:
        value = table["on_lapse"]
        if not isinstance(value, str) or value not in _ON_LAPSE:
            raise ConfigError(
                f'{where}.on_lapse: expected "rerun" or "refuse", got {value!r} (a reconcile '
                "function is Python code: the library's Policy takes one, a proxy config "
                "cannot)"
            )
        policy = replace(policy, on_lapse="refuse" if value == "refuse" else "rerun")
    if "authorize" in table:
        rule = table["authorize"]
        if not isinstance(rule, Mapping):
            raise ConfigError(f"{where}.authorize: expected a table (scopes, claims)")
        try:
            policy = replace(policy, authorize=AuthRule.of(rule))
        except ValueError as exc:
            raise ConfigError(f"{where}.authorize: {exc}") from None
    return policy


def parse(data: Mapping[str, Any], source: str = "config") -> ProxyConfig:
    """A `ProxyConfig` from parsed TOML (`source` names it in errors)."""
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(sorted(unknown))}")
    base = Policy(scope=scope_named("subject"), max_runtime=DEFAULT_MAX_RUNTIME)
    default_table = data.get("default", {})
    if not isinstance(default_table, Mapping):
        raise ConfigError(f"{source}: [default] must be a table")
    default = _policy(default_table, base, f"{source} [default]")
    tools = data.get("tools", {})
    if not isinstance(tools, Mapping):
        raise ConfigError(f"{source}: [tools] must be a table of tables")
    rules = []
    for pattern, table in tools.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f'{source}: [tools."{pattern}"] must be a table')
        policy = _policy(table, default, f'{source} [tools."{pattern}"]').with_name(pattern)
        rules.append(ToolRule(pattern, policy, exact=not any(c in pattern for c in "*?[")))
    store = data.get("store")
    if store is not None and not isinstance(store, str):
        raise ConfigError(f"{source}: store must be a URL string")
    forward_key = data.get("forward_key", False)
    if not isinstance(forward_key, bool):
        raise ConfigError(f"{source}: forward_key must be true or false")
    grace = duration(data.get("shutdown_grace", 30), f"{source}: shutdown_grace")
    return ProxyConfig(
        default=default,
        rules=tuple(rules),
        store=store,
        forward_key=forward_key,
        shutdown_grace=grace,
        allowed_hosts=_strings(data, "allowed_hosts", source),
        allowed_origins=_strings(data, "allowed_origins", source),
    )


def _strings(data: Mapping[str, Any], key: str, source: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{source}: {key} must be a list of non-empty strings")
    return tuple(v.strip() for v in value)


def load(path: str | Path) -> ProxyConfig:
    """Read a TOML file (see the module docstring for its shape)."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return parse(data, str(path))
