"""Retention documentation for an idempotent MCP server, generated from what it really runs.

SEP-3182 ("Retention") asks servers to publish their retention window where integrators can
read it. A hand-written page drifts from the code the day someone edits `@idempotent(...)`, so
this module reads the `Installation` that `install()` left on the server (the policies the
engine will apply, the store it writes to, the error codes it sends) and renders that.

It only reads idemtools' own `Installation`, never the mcp SDK, so it works unchanged on every
SDK line `install()` supports.

    server = load_server("myapp.server:server")      # import, find, check idemtools is on it
    doc = anyio.run(describe, server)                 # a ServerDoc: plain, frozen data
    render_markdown(doc)  /  render_json(doc)         # deterministic: same doc, same bytes
"""

from __future__ import annotations

import dataclasses
import html
import importlib
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .errors import ErrorCodes
from .installation import installation_of
from .policy import Policy
from .scopes import TRANSPORTS
from .stores.base import TransactionalStore

__all__ = [
    "DocsError",
    "ErrorDoc",
    "NotInstalledError",
    "ServerDoc",
    "ServerImportError",
    "SpecError",
    "StoreDoc",
    "ToolDoc",
    "describe",
    "example_arguments",
    "format_duration",
    "load_server",
    "module_file",
    "parse_spec",
    "render_json",
    "render_markdown",
    "render_page",
]

JSON_SCHEMA = "idemtools.docs/1"
"""Identifies the shape of `render_json` output, so machines can tell if it ever changes."""

EXAMPLE_KEY = "5f0c6f0e-2d4b-4c8e-9a51-8b7f3c2e1d90"
"""A fixed key for the examples: a random one would make every build differ."""


# -- errors -------------------------------------------------------------------------------------


class DocsError(Exception):
    """The server could not be documented; the message says why, in one line."""


class SpecError(DocsError, ValueError):
    """A server reference is not of the form `module:attribute`."""


class ServerImportError(DocsError):
    """The server's module failed to import, or it has no such attribute."""


class NotInstalledError(DocsError):
    """The object was found, but `idemtools.install()` was never called on it.

    Documenting such a server would publish a retention window it does not honour.
    """


# -- the data -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolDoc:
    """One tool's row: what a keyed call to it gets."""

    name: str
    deduplicated: bool
    """Always true once idemtools is installed: tools without a policy get the default."""
    policy: str
    """"own" (declared with `@idempotent`) or "server default"."""
    retention_seconds: float
    retention: str
    lease_seconds: float
    lease: str
    scope: str
    """The scope's description (a custom scope's own words)."""
    transactional: str
    """"yes", "no", or why a requested transaction does not happen."""
    scope_name: str = ""
    """Short, for the table: the strategy's name (`by_auth_subject`), else its description."""
    scope_on: dict[str, str | None] = dataclasses.field(default_factory=dict)
    """What the scope is per transport ("HTTP", "stdio"); None: keyed calls refused there."""
    example_arguments: dict[str, Any] | None = None
    """Minimal valid `arguments` built from the tool's input schema (None: schema unknown)."""


@dataclass(frozen=True)
class StoreDoc:
    """Where records live, and what that means for restarts and for several instances."""

    kind: str
    label: str
    restarts: str
    instances: str
    bound: str = ""
    """What the store is bounded by, read from the store object the server passes to install()."""
    quota: str = ""
    """The per-caller (per-scope) record quota, or that there is none."""


@dataclass(frozen=True)
class ErrorDoc:
    """An `error.data.type` a client may receive, with its code and what to do about it."""

    type: str
    code: int
    meaning: str
    action: str


@dataclass(frozen=True)
class ServerDoc:
    """Everything the retention page shows, as plain data (also the JSON output)."""

    server: str
    source: str | None
    adapter: str
    store: StoreDoc
    default: ToolDoc
    tools: tuple[ToolDoc, ...]
    errors: tuple[ErrorDoc, ...]
    max_key_length: int
    max_outcome_bytes: int
    mark_replays: bool


# -- words --------------------------------------------------------------------------------------

_STORES: dict[str, tuple[str, str, str]] = {
    "memory": (
        "in-process memory",
        "Records are lost when the server restarts: a retry that reaches the restarted server "
        "runs the tool again.",
        "Per process: each instance or worker has its own records, so a retry that reaches "
        "another instance runs the tool again. Run one instance, or use a shared store.",
    ),
    "sqlite": (
        "SQLite database file",
        "Records survive restarts (they are in the database file).",
        "Shared by the processes on one host that open the same file; not shared across hosts.",
    ),
    "redis": (
        "Redis",
        "Records survive server restarts; they survive a Redis restart only as far as Redis "
        "persistence is configured.",
        "Shared by every instance that uses the same Redis.",
    ),
    "postgres": (
        "PostgreSQL",
        "Records survive restarts (they are in the database).",
        "Shared by every instance that uses the same database.",
    ),
}

# (meaning, what a client should do). Every ErrorCodes field must have an entry: a test checks.
_ERRORS: dict[str, tuple[str, str]] = {
    "idempotency_key_invalid": (
        "The key is not a string of 1 to {max_key} characters. Nothing ran.",
        "Fix the client: send a string key, e.g. a UUID.",
    ),
    "idempotency_arguments_invalid": (
        "The arguments are not plain JSON (NaN, infinity), so they cannot be compared. "
        "Nothing ran.",
        "Send JSON-representable arguments.",
    ),
    "idempotency_key_in_progress": (
        "A call with this key is still running. Nothing ran a second time.",
        "Retry the same request after `error.data.retryAfterMs` milliseconds.",
    ),
    "idempotency_key_conflict": (
        "This key was already used with a different tool name or different arguments. Nothing ran.",
        "Use a new key for a new operation; never reuse a key for different arguments.",
    ),
    "idempotency_scope_unavailable": (
        "The tool's scope cannot be determined for this request (for example HTTP without an "
        "access token, for a per-subject scope). Nothing ran.",
        "Authenticate, or call without a key if a duplicate is acceptable.",
    ),
    "idempotency_unauthorized": (
        "The tool's authorization check refused this caller; no recorded answer was read or "
        "written. Nothing ran.",
        "Call with credentials that grant the tool's permission.",
    ),
    "idempotency_store_full": (
        "The store is at its bound (live records or bytes); none is dropped early to make "
        "room. Nothing ran.",
        "Retry later; tell the server operator.",
    ),
    "idempotency_quota_exceeded": (
        "This caller already holds the maximum number of live records the server allows per "
        "scope (one caller flooding unique keys cannot lock others out). Nothing ran.",
        "Retry later with the same key, once older records expired; do not mint new keys "
        "faster than records expire.",
    ),
    "idempotency_store_unavailable": (
        "The idempotency store could not be reached, so the server refused rather than risk a "
        "second execution. Nothing ran (or, for a transactional tool, nothing it wrote was "
        "kept).",
        "Retry the same request later, with the same key.",
    ),
    "idempotency_record_corrupt": (
        "The stored record for this key cannot be read. The call was not run again.",
        "Do not retry with this key; check whether the first call took effect.",
    ),
    "idempotency_outcome_too_large": (
        "The original call ran, but its result exceeded {max_outcome} bytes and was not kept; "
        "this error is replayed in its place.",
        "Do not retry with this key: the operation already happened.",
    ),
    "idempotency_outcome_not_kept": (
        "The original call ran, but the idempotency store had no room left to keep its answer; "
        "a small marker was kept instead, so it never runs again under this key.",
        "Do not retry with this key: the operation already happened.",
    ),
}


def format_duration(seconds: float) -> str:
    """`86400` → "24 hours", `90` → "1 minute 30 seconds", `604800` → "7 days".

    Whole days are used from two days on: "24 hours" and "36 hours" read better than "1 day"
    and "1 day 12 hours" in a retention promise.
    """
    if seconds <= 0:
        return f"{_number(seconds)} seconds"
    whole = int(seconds)
    fraction = seconds - whole
    if fraction and whole < 60:
        return f"{_number(seconds)} seconds"
    parts: list[tuple[int, str]] = []
    rest = whole
    if rest >= 2 * 86400:
        parts.append((rest // 86400, "day"))
        rest %= 86400
    for size, unit in ((3600, "hour"), (60, "minute"), (1, "second")):
        if rest >= size:
            parts.append((rest // size, unit))
            rest %= size
    words = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts]
    if fraction:
        words.append(f"{_number(round(fraction, 3))} seconds")
    return " ".join(words)


def _number(value: float) -> str:
    """Seconds as shown: no ".0" on whole numbers, at most millisecond precision otherwise."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


# -- reading a server ---------------------------------------------------------------------------

_SPEC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `"package.module:attribute"` (attribute may be dotted) or raise `SpecError`."""
    found = _SPEC.match(spec.strip())
    if found is None:
        raise SpecError(
            f"{spec!r} is not a server reference: expected 'module:attribute', "
            "e.g. 'myapp.server:server'"
        )
    return found.group(1), found.group(2)


def _import_fresh(name: str) -> ModuleType:
    """Import `name` anew, from source, even if it is already in `sys.modules`.

    `mkdocs serve` rebuilds in the same process, so a plain import would keep documenting
    the first version of the server. Compiling the source ourselves also avoids a stale
    `.pyc` when an edit keeps the file's size and lands within the same second.
    """
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = spec.loader
    if not isinstance(loader, importlib.machinery.SourceFileLoader) or spec.origin is None:
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        source = loader.get_source(name) or ""
        code = compile(source, spec.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_server(spec: str, *, fresh: bool = False) -> Any:
    """Import the server named by `"module:attribute"` and check idemtools is installed on it.

    Args:
        fresh: import the module anew even if already imported (for rebuilds in one process).

    Raises:
        SpecError: `spec` is not `module:attribute`.
        ServerImportError: the module does not import, or lacks the attribute.
        NotInstalledError: the object has no idemtools `Installation`.
    """
    module_name, attribute = parse_spec(spec)
    try:
        module = _import_fresh(module_name) if fresh else importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ServerImportError(
                f"cannot import {module_name!r}: no module named {missing!r} "
                "(run from your project directory, or add it to PYTHONPATH)"
            ) from exc
        raise ServerImportError(
            f"cannot import {module_name!r}: it needs {missing!r}, which is not installed"
        ) from exc
    except SystemExit as exc:
        raise ServerImportError(
            f"cannot import {module_name!r}: it exited while being imported (code {exc.code!r}); "
            "start the server under `if __name__ == '__main__':`"
        ) from exc
    except Exception as exc:
        raise ServerImportError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ServerImportError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if installation_of(target) is None:
        raise NotInstalledError(_not_installed(spec, target))
    return target


def module_file(spec: str) -> str | None:
    """The source file of the module a spec names, if it has one (for `mkdocs serve` to watch)."""
    module_name, _ = parse_spec(spec)
    module = sys.modules.get(module_name)
    origin = getattr(module, "__file__", None)
    return origin if isinstance(origin, str) else None


def _not_installed(what: str, target: object) -> str:
    return (
        f"{what} ({type(target).__name__}) does not have idemtools installed: call "
        "idemtools.install(server) in the module that creates it"
    )


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."


async def describe(server: Any, *, source: str | None = None) -> ServerDoc:
    """Read what idemtools will do for every tool of `server`.

    Args:
        source: the `module:attribute` the server was loaded from, shown on the page.

    Raises:
        NotInstalledError: idemtools was never installed on `server`.
    """
    installation = installation_of(server)
    if installation is None:
        raise NotInstalledError(_not_installed(source or "the server", server))
    engine = installation.engine
    store = installation.store
    transactions = isinstance(store, TransactionalStore)
    kind = str(getattr(store, "kind", "") or type(store).__name__)
    label, restarts, instances = _STORES.get(
        kind,
        (
            f"custom store ({kind})",
            "See the store's documentation.",
            "See the store's documentation.",
        ),
    )
    tools = tuple(
        _tool_doc(
            t.name,
            t.policy,
            "own" if t.own else "server default",
            transactions,
            example_arguments(t.input_schema) if t.input_schema is not None else None,
        )
        for t in await installation.tools()
    )
    codes: ErrorCodes = engine.codes
    errors = tuple(
        ErrorDoc(
            type=f.name,
            code=codes.code_for(f.name),
            meaning=_ERRORS.get(f.name, ("", ""))[0].format(
                max_key=engine.max_key_length, max_outcome=engine.max_outcome_bytes
            ),
            action=_ERRORS.get(f.name, ("", ""))[1],
        )
        for f in dataclasses.fields(codes)
    )
    name = getattr(server, "name", None)
    return ServerDoc(
        server=name if isinstance(name, str) and name else (source or type(server).__name__),
        source=source,
        adapter=installation.adapter,
        store=StoreDoc(
            kind=kind,
            label=label,
            restarts=restarts,
            instances=instances,
            bound=_bound(kind, store),
            quota=_quota(store),
        ),
        default=_tool_doc("(default)", engine.default_policy, "server default", transactions),
        tools=tools,
        errors=errors,
        max_key_length=engine.max_key_length,
        max_outcome_bytes=engine.max_outcome_bytes,
        mark_replays=engine.mark_replays,
    )


def _bytes(size: int) -> str:
    """`268435456` → "256 MiB"; sizes that are not whole KiB/MiB/GiB stay in bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift:,} {unit}"
    return f"{size:,} bytes"


def _bound(kind: str, store: object) -> str:
    """The store's own limits, read from the object (so the page shows what was configured)."""
    max_bytes = getattr(store, "max_bytes", None)
    max_records = getattr(store, "max_records", None)
    parts = []
    if isinstance(max_bytes, int):
        parts.append(f"{_bytes(max_bytes)} of records (`max_bytes`)")
    if isinstance(max_records, int):
        parts.append(f"{max_records:,} live records (`max_records`)")
    if parts:
        limit = "at most " + " and ".join(parts)
    elif kind == "redis":
        limit = "Redis `maxmemory` (with `maxmemory-policy noeviction`)"
    elif kind == "postgres":
        limit = "the database's disk"
    else:
        return "See the store's documentation."
    return (
        f"{limit}. At the bound, new keyed calls are refused with `idempotency_store_full`; "
        "no record is dropped before its retention ends."
    )


def _quota(store: object) -> str:
    quota = getattr(store, "max_records_per_scope", None)
    if isinstance(quota, int):
        return (
            f"at most {quota:,} live records per scope (`max_records_per_scope`); a caller "
            "beyond it gets `idempotency_quota_exceeded`, other callers are unaffected."
        )
    return "none: one caller may fill the store up to its bound."


def _tool_doc(
    name: str,
    policy: Policy,
    source: str,
    transactions: bool,
    example: dict[str, Any] | None = None,
) -> ToolDoc:
    if not policy.transactional:
        transactional = "no"
    elif transactions:
        transactional = "yes"
    else:
        transactional = "requested, but this store has no transactions"
    return ToolDoc(
        name=name,
        deduplicated=True,
        policy=source,
        retention_seconds=policy.retention,
        retention=format_duration(policy.retention),
        lease_seconds=policy.lease,
        lease=format_duration(policy.lease),
        scope=policy.scope.description,
        transactional=transactional,
        scope_name=policy.scope.name,
        scope_on=dict(policy.scope.on),
        example_arguments=example,
    )


# -- example arguments from a tool's input schema ------------------------------------------------

_FORMATS: dict[str, str] = {
    "date-time": "2025-01-01T00:00:00Z",
    "date": "2025-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": EXAMPLE_KEY,
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "hostname": "example.com",
}
_MAX_DEPTH = 8  # a recursive model (a tree) stops here: required recursion has no finite value


def example_arguments(schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """Minimal `arguments` that a tool's JSON Schema accepts: its required properties only.

    Values come from the schema where it offers one (`const`, `enum`, `examples`, `default`),
    else a placeholder of the right type that honours bounds (`minimum`, `minLength`,
    `minItems`, `multipleOf`...), following `$ref` into `$defs`/`definitions`, `allOf`,
    `anyOf`/`oneOf` (the first branch that is not `null`) and `prefixItems`. Written by hand:
    no maintained library builds one deterministic example; fuzzers (hypothesis-jsonschema)
    build random ones. A `pattern` is honoured when one of a few placeholders matches it.
    """
    if not schema:
        return {}
    value = _example(schema, schema, 0)
    return value if isinstance(value, dict) else {}


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    for _ in range(_MAX_DEPTH):
        ref = node.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#"):
            return node
        target: Any = root
        for part in ref[1:].split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        if not isinstance(target, Mapping):
            return {k: v for k, v in node.items() if k != "$ref"}
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _example(node: Any, root: Mapping[str, Any], depth: int) -> Any:
    if not isinstance(node, Mapping):
        return None  # `true` (anything goes) or a malformed schema
    node = _resolve(node, root)
    if "const" in node:
        return node["const"]
    enum = node.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    examples = node.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    if "default" in node:
        return node["default"]
    parts = node.get("allOf")
    if isinstance(parts, list) and parts:
        merged: dict[str, Any] = {k: v for k, v in node.items() if k != "allOf"}
        for part in parts:
            if isinstance(part, Mapping):
                part = _resolve(part, root)
                merged = _merge(merged, part)
        return _example(merged, root, depth + 1)
    for word in ("anyOf", "oneOf"):
        branches = node.get(word)
        if isinstance(branches, list) and branches:
            chosen = (
                next((b for b in branches if _resolve(b, root).get("type") != "null"), branches[0])
                if all(isinstance(b, Mapping) for b in branches)
                else branches[0]
            )
            return _example(chosen, root, depth + 1)
    kind = node.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), kind[0] if kind else None)
    if kind is None:
        kind = _implied_type(node)
    if depth > _MAX_DEPTH:
        return None
    if kind == "object":
        return _object(node, root, depth)
    if kind == "array":
        return _array(node, root, depth)
    if kind == "string":
        return _string(node)
    if kind in ("integer", "number"):
        return _number_in(node, integer=kind == "integer")
    if kind == "boolean":
        return True
    return None


_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def _merge(first: Mapping[str, Any], second: Mapping[str, Any]) -> dict[str, Any]:
    """Two `allOf` parts as one schema: properties and `required` united, the tighter bound
    of each kept (shallow: a property both parts define takes the second's schema)."""
    merged = {**first, **second}
    properties = {**first.get("properties", {}), **second.get("properties", {})}
    if properties:
        merged["properties"] = properties
    required = [*first.get("required", []), *second.get("required", [])]
    if required:
        merged["required"] = list(dict.fromkeys(required))
    for words, pick in ((_LOWER_BOUNDS, max), (_UPPER_BOUNDS, min)):
        for word in words:
            both = [
                v
                for v in (first.get(word), second.get(word))
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            ]
            if both:
                merged[word] = pick(both)
    return merged


def _implied_type(node: Mapping[str, Any]) -> str | None:
    if "properties" in node or "required" in node or "additionalProperties" in node:
        return "object"
    if "items" in node or "prefixItems" in node:
        return "array"
    return None


def _object(node: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> dict[str, Any]:
    properties = node.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = node.get("required")
    names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
    value = {name: _example(properties.get(name, {}), root, depth + 1) for name in names}
    extra = node.get("additionalProperties")
    wanted = node.get("minProperties")
    index = 0
    while isinstance(wanted, int) and len(value) < wanted and index < wanted + len(properties):
        name = next((n for n in properties if n not in value), None) or f"key{index}"
        schema = properties.get(name, extra if isinstance(extra, Mapping) else {})
        value[name] = _example(schema, root, depth + 1)
        index += 1
    return value


def _array(node: Mapping[str, Any], root: Mapping[str, Any], depth: int) -> list[Any]:
    prefix = node.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    items = node.get("items")
    if isinstance(items, list):  # draft 4-2019 tuples
        prefix, items = items, node.get("additionalItems")
    least = node.get("minItems")
    count = max(len(prefix), least if isinstance(least, int) else 0)
    value = [
        _example(prefix[i] if i < len(prefix) else (items or {}), root, depth + 1)
        for i in range(count)
    ]
    if node.get("uniqueItems") and len(value) > len(prefix) + 1:
        value[len(prefix) :] = _distinct(items, root, value[len(prefix) :])
    return value


def _distinct(items: Any, root: Mapping[str, Any], value: list[Any]) -> list[Any]:
    """`uniqueItems`: an enum's first values, else plain numbers and strings told apart by
    their position (formats, patterns and bounds are not re-checked: best effort)."""
    schema = _resolve(items, root) if isinstance(items, Mapping) else {}
    enum = schema.get("enum")
    if isinstance(enum, list) and len(enum) >= len(value):
        return enum[: len(value)]
    out = []
    for index, item in enumerate(value):
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            item = item + index
        elif isinstance(item, str) and index:
            item = item + str(index)
        out.append(item)
    return out


def _string(node: Mapping[str, Any]) -> str:
    text = _FORMATS.get(str(node.get("format", "")), "string")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            regex = re.compile(pattern)
        except re.error:
            regex = None
        if regex is not None and not regex.search(text):
            text = next((c for c in (_shortest_match(pattern),) if c and regex.search(c)), text)
    least, most = node.get("minLength"), node.get("maxLength")
    if isinstance(least, int) and len(text) < least:
        text = (text * (least // max(len(text), 1) + 1))[:least]
    if isinstance(most, int) and len(text) > most:
        text = text[: max(most, least if isinstance(least, int) else 0)]
    return text


_CATEGORY_CHARS = {
    "CATEGORY_DIGIT": "0",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-",
}


def _shortest_match(pattern: str) -> str | None:
    """A short string `pattern` matches, read off the regex's parse tree; None if unsure.

    By hand because the libraries that do this (exrex, rstr) are random or unmaintained and
    would be a runtime dependency for one docs example; the caller checks the result matches.
    """
    try:
        if sys.version_info >= (3, 11):
            import re._parser as sre_parse
        else:  # pragma: no cover - 3.10
            import sre_parse
        tree: Any = sre_parse.parse(pattern)  # a SubPattern: a sequence of (op, argument)
        return _emit(list(tree))
    except Exception:
        return None


def _emit(items: list[Any]) -> str:
    out = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_one_of(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            least, _most, body = arg
            out.append(_emit(list(body)) * least)
        elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
            out.append(_emit(list(arg[-1] if name == "SUBPATTERN" else arg)))
        elif name == "BRANCH":
            out.append(min((_emit(list(b)) for b in arg[1]), key=len))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue  # anchors and lookarounds take no characters; the caller checks
        else:
            raise ValueError(name)
    return "".join(out)


def _one_of(spec: list[Any]) -> str:
    if spec and str(spec[0][0]) == "NEGATE":
        banned = {chr(a) for op, a in spec[1:] if str(op) == "LITERAL"}
        return next(c for c in "a0-_ xyzZ" if c not in banned)
    op, arg = spec[0]
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name == "RANGE":
        return chr(arg[0])
    if name == "CATEGORY":
        return _CATEGORY_CHARS.get(str(arg), "a")
    raise ValueError(name)


def _number_in(node: Mapping[str, Any], *, integer: bool) -> int | float:
    """The first of a few candidates (1, 0, the bounds, their midpoint...) the bounds accept."""

    def bound(word: str) -> float | None:
        value = node.get(word)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    low, high = bound("minimum"), bound("maximum")
    low_open = node.get("exclusiveMinimum") is True  # draft 4 spelling
    high_open = node.get("exclusiveMaximum") is True
    open_low, open_high = bound("exclusiveMinimum"), bound("exclusiveMaximum")
    if open_low is not None and (low is None or open_low >= low):
        low, low_open = open_low, True
    if open_high is not None and (high is None or open_high <= high):
        high, high_open = open_high, True
    step = bound("multipleOf")
    step = step if step is not None and step > 0 else None

    def accepts(value: float) -> bool:
        if integer and not float(value).is_integer():
            return False
        if low is not None and (value <= low if low_open else value < low):
            return False
        if high is not None and (value >= high if high_open else value > high):
            return False
        if step is not None:
            quotient = value / step
            return int(quotient) == quotient
        return True

    candidates: list[float] = [1, 0, -1]
    for edge, direction in ((low, 1), (high, -1)):
        if edge is not None:
            candidates += [edge, edge + direction, math.floor(edge) + direction]
            if step is not None:
                multiple = (math.ceil if direction > 0 else math.floor)(edge / step) * step
                candidates += [multiple, multiple + direction * step]
    if low is not None and high is not None:
        candidates += [(low + high) / 2, math.floor((low + high) / 2)]
    chosen = next((c for c in candidates if accepts(c)), candidates[-1])
    if integer or float(chosen).is_integer():
        return int(chosen)
    return float(chosen)


# -- rendering ----------------------------------------------------------------------------------


def render_json(doc: ServerDoc) -> str:
    """The document as JSON, keys sorted, ending in a newline: stable for diffs and machines."""
    data = {"schema": JSON_SCHEMA, **dataclasses.asdict(doc)}
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _cell(text: str) -> str:
    """Table-safe text: user-written scope names may hold `|`, `<` or newlines."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _code(text: str) -> str:
    fence = "``" if "`" in text else "`"
    pad = " " if "`" in text else ""
    return f"{fence}{pad}{text.replace('|', '&#124;')}{pad}{fence}"


def render_markdown(doc: ServerDoc, *, title: str | None = None, level: int = 1) -> str:
    """The retention page for one server, as Markdown (Python-Markdown / GFM tables).

    Args:
        title: the heading; defaults to "Idempotency and retention: <server>".
        level: heading level of the title (sections go one deeper), to nest several servers.
    """
    h = "#" * level
    hh = "#" * (level + 1)
    heading = title or f"Idempotency and retention: {doc.server}"
    out: list[str] = [f"{h} {heading}", ""]
    origin = f" (`{doc.source}`)" if doc.source else ""
    out += [
        f"Server **{_cell(doc.server)}**{origin} supports MCP request idempotency "
        "(SEP-3182): "
        "it advertises `capabilities.tools.idempotency`, and a `tools/call` that carries an "
        "`idempotencyKey` runs at most once per key within the retention window below. "
        "A retry with the same key, tool and arguments gets the original answer again, "
        "success or error, without running the tool. Calls without a key are unaffected.",
        "",
        "<!-- Generated by idemtools from the server's policies; do not edit by hand. -->",
        "",
        f"{hh} Tools",
        "",
        "Every tool deduplicates keyed calls.",
        "",
        "| Tool | Retention | Lease | Scope | Transactional |",
        "|---|---|---|---|---|",
    ]
    for t in doc.tools:
        out.append(_row(t))
    if not doc.tools:
        out.append("| *(no tools listed)* | | | | |")
    d = doc.default
    out += [
        "",
        "Tools marked *server default* have no policy of their own and get the server's "
        f"default: retention {_with_seconds(d.retention, d.retention_seconds)}, lease "
        f"{_with_seconds(d.lease, d.lease_seconds)}, scope {_scope_label(d.scope_name)}.",
        "",
        "- **Retention**: how long a completed call's answer is replayed. After it, the key "
        "is new again and the same request runs the tool again.",
        "- **Lease**: how long a running call holds its key without renewal. The server "
        "renews it while the tool runs; if the server process dies mid-call, a retry after "
        "the lease runs the tool again (the SEP's stated crash limit).",
        "- **Scope**: whose earlier calls a key can match. The same key from two callers in "
        "different scopes never meets.",
        "- **Transactional**: the tool's own database writes and its idempotency record "
        "commit together, which closes the crash window above for those writes.",
        "",
        f"{hh} Scopes",
        "",
        "Who a scope's records belong to depends on the transport the server is run on.",
        "",
        "| Scope | over HTTP | over stdio (or in-memory) |",
        "|---|---|---|",
        *_scope_rows(doc),
        "",
        f"{hh} Store",
        "",
        f"Records are kept in **{_cell(doc.store.label)}** (`{doc.store.kind}`): the store "
        "this server passes to `install()`.",
        "",
        f"- **Restarts**: {doc.store.restarts}",
        f"- **Several instances**: {doc.store.instances}",
        f"- **Bound**: {doc.store.bound}",
        f"- **Per-caller quota**: {doc.store.quota}",
        "",
        f"{hh} Calling with a key",
        "",
        "Generate one key (a UUID) per logical operation and send it in `params`, beside "
        "`name` and `arguments` (the tool's own arguments go in `arguments`, as usual). "
        "On a timeout or a lost connection, resend exactly the same "
        "request, key included.",
        "",
        "```json",
        _example_request(doc),
        "```",
        "",
        *(
            []
            if any(t.example_arguments is not None for t in doc.tools)
            else [
                "(This server does not list its tools' input schemas to idemtools, so the "
                "example's `arguments` is empty: put the tool's own arguments there.)",
                "",
            ]
        ),
        f"Keys are strings of 1 to {doc.max_key_length} characters. Arguments are compared "
        "as parsed JSON: key order, whitespace and `1` versus `1.0` do not matter. Integers "
        "compare exactly at any size; a number written with a fraction or an exponent is read "
        "as a double, rounded beyond 2^53: send large exact numbers as integers. Replayed "
        "results are "
        + (
            'marked with `_meta["io.github.idemtools/replayed"] = true`.'
            if doc.mark_replays
            else "identical to the original, with no marker."
        ),
        "",
        "While the first call is still running, a retry is refused at once:",
        "",
        "```json",
        _example_in_progress(doc),
        "```",
        "",
        f"{hh} Errors a client may see",
        "",
        "Read `error.data.type`; the codes are this server's configuration.",
        "",
        "| `error.data.type` | Code | What it means, and what to do |",
        "|---|---|---|",
    ]
    for e in doc.errors:
        out.append(
            f"| {_unbroken(e.type)} | {e.code} | {_cell(e.meaning)} *To do:* {_cell(e.action)} |"
        )
    return "\n".join(out) + "\n"


def _row(t: ToolDoc) -> str:
    source = "" if t.policy == "own" else f" *({t.policy})*"
    return (
        f"| {_code(t.name)}{source} | {_with_seconds(t.retention, t.retention_seconds)} "
        f"| {_with_seconds(t.lease, t.lease_seconds)} | {_scope_label(t.scope_name)} "
        f"| {_cell(t.transactional)} |"
    )


_SCOPE_NAMES = re.compile(r"[A-Za-z_]\w*(?: [|&] [A-Za-z_]\w*)*")


def _unbroken(identifier: str) -> str:
    """Code that a narrow table column does not break mid-word (mkdocs-material breaks code
    anywhere, which turns `idempotency_key_invalid` into three unreadable pieces)."""
    return f'<code style="white-space: nowrap">{html.escape(identifier)}</code>'


def _scope_label(name: str) -> str:
    """Built-in strategies (and their combinations) as code, anything else as text."""
    if _SCOPE_NAMES.fullmatch(name):
        return " ".join(
            part.replace("|", "\\|") if part in ("|", "&") else _unbroken(part)
            for part in name.split(" ")
        )
    return _cell(name)


def _scope_rows(doc: ServerDoc) -> list[str]:
    seen: dict[str, ToolDoc] = {}
    for t in (*doc.tools, doc.default):
        seen.setdefault(t.scope_name, t)
    rows = []
    for name, t in seen.items():
        cells = [
            _cell(words) if words is not None else "refused: `idempotency_scope_unavailable`"
            for words in (t.scope_on.get(transport, t.scope) for transport in TRANSPORTS)
        ]
        rows.append(f"| {_scope_label(name)} | {' | '.join(cells)} |")
    return rows


def _with_seconds(text: str, seconds: float) -> str:
    """ "2 minutes (120 s)", but just "45 seconds" where the words already say it."""
    plain = f"{_number(seconds)} second{'' if seconds == 1 else 's'}"
    return text if text == plain else f"{text} ({_number(seconds)} s)"


def _example_request(doc: ServerDoc) -> str:
    # A tool with a known schema, so `arguments` is a request its server would accept.
    tool = next((t for t in doc.tools if t.example_arguments is not None), None)
    name = tool.name if tool else (doc.tools[0].name if doc.tools else "tool_name")
    arguments = tool.example_arguments if tool and tool.example_arguments is not None else {}
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "idempotencyKey": EXAMPLE_KEY},
    }
    return _example_json(request)


EXAMPLE_WIDTH = 76
"""Longest line of the JSON examples: a code block this wide fits the text column of an
mkdocs-material page in a 1280 px window (tests/test_browser.py checks it)."""

_LONG_MEMBER = re.compile(r'^( *)("(?:[^"\\]|\\.)*":) (.*)$')


def _example_json(value: Any) -> str:
    """Indented JSON whose long members put their value on the next line (still valid JSON:
    whitespace may follow the colon), so no line needs sideways scrolling on the page."""
    lines = []
    for line in json.dumps(value, indent=2, ensure_ascii=False).splitlines():
        found = _LONG_MEMBER.match(line) if len(line) > EXAMPLE_WIDTH else None
        if found is None:
            lines.append(line)
            continue
        indent, name, rest = found.groups()
        lines += [f"{indent}{name}", f"{indent}  {rest}"]
    return "\n".join(lines)


def _example_in_progress(doc: ServerDoc) -> str:
    codes = {e.type: e.code for e in doc.errors}
    response = {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {
            "code": codes.get("idempotency_key_in_progress", -32603),
            "message": "a request with this idempotencyKey is still in progress; retry shortly",
            "data": {
                "type": "idempotency_key_in_progress",
                "idempotencyKey": EXAMPLE_KEY,
                "retryAfterMs": 250,
            },
        },
    }
    return _example_json(response)


def render_page(docs: Sequence[ServerDoc], *, title: str) -> str:
    """One page for several servers: the title, then each server one heading level down."""
    if len(docs) == 1:
        return render_markdown(docs[0], title=title)
    parts = [f"# {title}\n"]
    parts += [render_markdown(doc, level=2) for doc in docs]
    return "\n".join(parts)
