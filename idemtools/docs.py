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
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .errors import ErrorCodes
from .installation import installation_of
from .policy import Policy
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
    transactional: str
    """"yes", "no", or why a requested transaction does not happen."""


@dataclass(frozen=True)
class StoreDoc:
    """Where records live, and what that means for restarts and for several instances."""

    kind: str
    label: str
    restarts: str
    instances: str


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
        _tool_doc(t.name, t.policy, "own" if t.own else "server default", transactions)
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
        store=StoreDoc(kind=kind, label=label, restarts=restarts, instances=instances),
        default=_tool_doc("(default)", engine.default_policy, "server default", transactions),
        tools=tools,
        errors=errors,
        max_key_length=engine.max_key_length,
        max_outcome_bytes=engine.max_outcome_bytes,
        mark_replays=engine.mark_replays,
    )


def _tool_doc(name: str, policy: Policy, source: str, transactions: bool) -> ToolDoc:
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
    )


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
        "| Tool | Keyed calls deduplicated | Retention | Retention (seconds) | Lease "
        "| Scope | Transactional | Policy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in doc.tools:
        out.append(_row(t))
    if not doc.tools:
        out.append("| *(no tools listed)* | | | | | | | |")
    d = doc.default
    out += [
        "",
        "Tools marked *server default* have no policy of their own and get the server's "
        f"default: retention {_with_seconds(d.retention, d.retention_seconds)}, lease "
        f"{_with_seconds(d.lease, d.lease_seconds)}, scope {_cell(d.scope)}.",
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
        f"{hh} Store",
        "",
        f"Records are kept in **{_cell(doc.store.label)}** (`{doc.store.kind}`).",
        "",
        f"- **Restarts**: {doc.store.restarts}",
        f"- **Several instances**: {doc.store.instances}",
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
        f"Keys are strings of 1 to {doc.max_key_length} characters. Arguments are compared "
        "as parsed JSON: key order, whitespace and `1` versus `1.0` do not matter. Replayed "
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
        "| `error.data.type` | Code | Meaning | What to do |",
        "|---|---|---|---|",
    ]
    for e in doc.errors:
        out.append(f"| `{e.type}` | {e.code} | {_cell(e.meaning)} | {_cell(e.action)} |")
    return "\n".join(out) + "\n"


def _row(t: ToolDoc) -> str:
    return (
        f"| {_code(t.name)} | {'yes' if t.deduplicated else 'no'} | {t.retention} "
        f"| {_number(t.retention_seconds)} | {_with_seconds(t.lease, t.lease_seconds)} "
        f"| {_cell(t.scope)} | {_cell(t.transactional)} | {t.policy} |"
    )


def _with_seconds(text: str, seconds: float) -> str:
    """ "2 minutes (120 s)", but just "45 seconds" where the words already say it."""
    plain = f"{_number(seconds)} second{'' if seconds == 1 else 's'}"
    return text if text == plain else f"{text} ({_number(seconds)} s)"


def _example_request(doc: ServerDoc) -> str:
    name = doc.tools[0].name if doc.tools else "tool_name"
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": {}, "idempotencyKey": EXAMPLE_KEY},
    }
    return json.dumps(request, indent=2, ensure_ascii=False)


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
    return json.dumps(response, indent=2, ensure_ascii=False)


def render_page(docs: Sequence[ServerDoc], *, title: str) -> str:
    """One page for several servers: the title, then each server one heading level down."""
    if len(docs) == 1:
        return render_markdown(docs[0], title=title)
    parts = [f"# {title}\n"]
    parts += [render_markdown(doc, level=2) for doc in docs]
    return "\n".join(parts)
