"""idemtools' own store options in a store URL's query, typed, and the rest checked now.

One URL (`--store`, `IDEMTOOLS_STORE`) configures a deployment, so every option a store's
constructor or `from_url` takes that makes sense as text may ride in the query:
`redis://host/0?prefix=app:&timeout=2s`. Each is converted here (integers, numbers, durations,
flags) with an error naming it; what idemtools does not take belongs to the driver (redis-py,
libpq), which is asked at construction whether it takes it, so that a misspelt option is a
configuration error now, not `idempotency_store_unavailable` at the first keyed call. Errors
name the option and its value, never the URL (it may hold a password).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = [
    "OPTIONS",
    "InvalidStoreURLError",
    "defaults",
    "driver_refused",
    "leftover",
    "merged",
    "take",
    "unknown",
]


class InvalidStoreURLError(ValueError):
    """A store URL that cannot be used (a ValueError); its message never holds a credential."""


Convert = Callable[[str, str], Any]


def integer(name: str, value: str) -> int:
    try:
        return int(value.replace("_", ""))
    except ValueError:
        raise InvalidStoreURLError(
            f"store URL option {name}= must be an integer, got {value!r}"
        ) from None


def _none_or(convert: Convert, *, share: bool = False) -> Convert:
    """`none` turns an optional bound off; `share` (where the constructor has it) keeps the
    store's default share of its total."""

    def parse(name: str, value: str) -> Any:
        word = value.strip().lower()
        if word == "none":
            return None
        if share and word == "share":
            return "share"
        return convert(name, value)

    return parse


def number(name: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise InvalidStoreURLError(
            f"store URL option {name}= must be a number, got {value!r}"
        ) from None


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def duration(name: str, value: str) -> float:
    """Seconds: `5`, `2.5`, `250ms`, `5s`, `2m`, `1h`."""
    found = _DURATION.match(value.lower())
    if found is None:
        raise InvalidStoreURLError(
            f"store URL option {name}= must be a duration (seconds, or with ms, s, m or h: "
            f"250ms, 5s, 2m), got {value!r}"
        )
    return float(found.group(1)) * _UNIT[found.group(2)]


def flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise InvalidStoreURLError(f"store URL option {name}= takes true or false, got {value!r}")


def text(name: str, value: str) -> str:
    return value


_PER_SCOPE = _none_or(integer, share=True)
_QUOTA = _none_or(integer)

# Per store kind: the options its constructor and `from_url` take that make sense as text.
OPTIONS: dict[str, dict[str, Convert]] = {
    "memory": {
        "max_records": integer,
        "max_bytes": integer,
        "max_records_per_scope": _PER_SCOPE,
        "max_bytes_per_scope": _PER_SCOPE,
    },
    "sqlite": {
        "max_records": _QUOTA,
        "max_bytes": integer,
        "max_records_per_scope": _QUOTA,
        "max_bytes_per_scope": _PER_SCOPE,
        "busy_timeout": duration,
        "cleanup_batch": integer,
    },
    "redis": {
        "prefix": text,
        "max_records_per_scope": _QUOTA,
        "allow_eviction": flag,
        "coalesce": flag,
        "wait_replicas": integer,
        "wait_timeout": duration,
        "policy_recheck": duration,
        "connect_timeout": duration,
        "timeout": duration,
        "max_connections": integer,
    },
    "postgres": {
        "table": text,
        "min_size": integer,
        "max_size": integer,
        "connect_timeout": duration,
        "timeout": duration,
        "purge_every": integer,
        "purge_limit": integer,
        "max_records_per_scope": _QUOTA,
        "transaction_reserve": integer,
        "transaction_wait": _none_or(duration),
        "max_bytes": _QUOTA,
    },
}
_STORE = {"memory": "MemoryStore", "sqlite": "SQLiteStore", "redis": "RedisStore"}
_STORE["postgres"] = "PostgresStore"
_DRIVER = {"redis": "redis-py", "postgres": "libpq"}


def take(url: str, kind: str) -> tuple[str, dict[str, Any]]:
    """The URL without idemtools' own options for a store of `kind`, and those options typed.

    Only the query is rebuilt; everything before `?` stays as written (a `sqlite:` path, and
    `unix:///path` and `redis:///0`, whose empty host a parsed-and-rebuilt URL would drop:
    `unix:/path`, which redis-py 8.2 refuses).
    """
    own = OPTIONS[kind]
    head, mark, query = url.partition("?")
    query, hashmark, fragment = query.partition("#")
    if not mark:
        return url, {}
    found: dict[str, Any] = {}
    rest: list[tuple[str, str]] = []
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name in own:
            found[name] = own[name](name, value)
        else:
            rest.append((name, value))
    if not found:
        return url, {}
    return head + ("?" + urlencode(rest) if rest else "") + hashmark + fragment, found


def unknown(kind: str, name: str) -> InvalidStoreURLError:
    """The error for a query option neither idemtools nor the store's driver takes."""
    driver = _DRIVER.get(kind)
    who = (
        f"neither {_STORE[kind]} nor {driver} takes it"
        if driver
        else f"{_STORE[kind]} does not take it"
    )
    return InvalidStoreURLError(
        f"store URL option {name}= is unknown: {who}; {_STORE[kind]}'s own are "
        + ", ".join(sorted(OPTIONS[kind]))
    )


def leftover(url: str) -> list[str]:
    """The names in a URL's query (after `take`: what is left for the driver)."""
    _, mark, query = url.partition("?")
    return [name for name, _ in parse_qsl(query, keep_blank_values=True)] if mark else []


_UNEXPECTED = re.compile(r"unexpected keyword argument '([^']+)'")


def driver_refused(kind: str, url: str, exc: Exception) -> InvalidStoreURLError | None:
    """The option error for what the driver raised at construction, or None when its
    complaint is not about a query option (the caller re-raises it then)."""
    named = _UNEXPECTED.search(str(exc))
    if named is not None and named.group(1) in leftover(url):
        return unknown(kind, named.group(1))
    pg = re.search(r'invalid URI query parameter: "([^"]+)"', str(exc))
    if pg is not None:
        return unknown(kind, pg.group(1))
    for name in leftover(url):  # redis-py: "Invalid value for 'socket_timeout' in connection URL."
        if f"'{name}'" in str(exc) and "Invalid value" in str(exc):
            return InvalidStoreURLError(
                f"store URL option {name}= has a value {_DRIVER[kind]} refuses"
            )
    return None


def merged(
    found: Mapping[str, Any], given: Mapping[str, Any], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """`from_url`'s keywords with the URL's options applied: a keyword left at its default
    takes the URL's value; one given otherwise wins, as in `stores.from_url`."""
    out = {name: value for name, value in given.items() if name in defaults}
    for name, value in found.items():
        if name not in out or out[name] == defaults[name]:
            out[name] = value
    return out


@functools.cache
def defaults(func: Callable[..., Any]) -> Mapping[str, Any]:
    """The keyword parameters of `func` that have defaults, and those defaults."""
    return {
        name: p.default
        for name, p in inspect.signature(func).parameters.items()
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty
    }
