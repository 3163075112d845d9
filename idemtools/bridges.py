"""Key bridges: where a key comes from when a client sends no `idempotencyKey`.

This is **outside SEP-3182**. The SEP's key is the top-level `idempotencyKey` of `tools/call`,
chosen by the client; no widely used MCP client sends it. A tool may opt in, per tool, to one
of two server-side bridges (`@idempotent(key_argument=...)` or `@idempotent(key_from=...)`):

- `key_argument="idempotency_key"`: the tool's input schema gets an optional string argument
  of that name, described so that a model generates one per operation and reuses it when it
  retries. Its value is the key when the client sent no `idempotencyKey` (the SEP field wins
  when both are there). The argument is never part of the fingerprint, and reaches the
  function only when its signature asks for it (a parameter of that name).
- `key_from=("order_id", "amount")`: the key is derived from those arguments' values
  (compared canonically, `1 == 1.0`), together with the tool's name. Derived keys live in a
  namespace of their own (`derived_scope`): no key a client sends can ever reach their
  records, whatever its text.

Everything here is transport-free: the adapters call `resolve` with what they read off the
wire and `with_key_argument` on each listed tool's schema, and nothing else. `BRIDGED` is the
hint that keeps unkeyed calls to tools without a bridge free: an adapter's unkeyed path asks
`if BRIDGED and name in BRIDGED` and nothing more.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

from .canonical import CanonicalizationError, canonicalize

__all__ = [
    "ARGUMENT",
    "BRIDGED",
    "DERIVED",
    "KEY_ARGUMENT_DESCRIPTION",
    "SEP",
    "Bridged",
    "KeySource",
    "derived_key",
    "derived_scope",
    "header_token",
    "key_sources",
    "note",
    "resolve",
    "with_key_argument",
]

KeySource = Literal["sep", "argument", "derived"]
"""Where a call's key came from: the SEP's `idempotencyKey`, a key argument, or derived."""

SEP: Final = "sep"
ARGUMENT: Final = "argument"
DERIVED: Final = "derived"

BRIDGED: set[str] = set()
"""Names of tools that may use a bridge: every name `@idempotent` or `Registry.register`
declared with one, and every listed tool found with one. A hint, never the decision (the
tool's own policy decides); empty in a process that uses no bridge, so that an unkeyed call
pays one truth test. Process-wide on purpose: a superset costs only a policy lookup."""

KEY_ARGUMENT_DESCRIPTION = (
    "Idempotency key for this operation (optional). Generate a new unique value, such as a "
    "UUID, for each distinct operation, and send the same value again when you retry that "
    "same operation: the server then performs it at most once and answers a retry with the "
    "first answer. Never reuse a value for a different operation."
)
"""What a model reads in the key argument's schema."""

_DERIVED_KEY_PREFIX = "derived:"
_DERIVED_SCOPE_PREFIX = "derived:"
_DIGEST_CHARS = 32  # 128 bits: the derived key stays short (a server may lower max_key_length)


class Bridged:
    """What a call comes to once its key source is resolved.

    Attributes:
        key: the key (not yet validated: the engine checks it as any key), or None: the call
            carries none and runs unprotected, as any unkeyed call.
        source: where the key came from (`KeySource`).
        arguments: the arguments the fingerprint and scope strategies see (the key argument
            left out).
        passed: the arguments the SDK hands to the tool: `arguments` unless the function asks
            for the key argument (then the call's own arguments, unchanged).
        changed: `passed` differs from what the client sent (the adapter must rewrite it).
    """

    __slots__ = ("arguments", "changed", "key", "passed", "source")

    def __init__(
        self,
        key: object,
        source: KeySource,
        arguments: Mapping[str, Any] | None,
        passed: Mapping[str, Any] | None,
        changed: bool,
    ) -> None:
        self.key = key
        self.source: KeySource = source
        self.arguments = arguments
        self.passed = passed
        self.changed = changed


def resolve(
    policy: Any,
    name: str,
    sep_key: object,
    arguments: Mapping[str, Any] | None,
    values: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> Bridged:
    """The key, its source and the arguments of one call to tool `name` under `policy`.

    `sep_key` is the top-level `idempotencyKey` (None: absent or null). The SEP field always
    wins; a bridge supplies a key only when it is absent. A null key argument is an absent
    one, as a null `idempotencyKey` is.

    `values(arguments)`: the values the SDK's own validation gives the tool (a decorated
    tool's); a derived key comes from them, so spellings the tool cannot tell apart derive one
    key. Arguments it refuses get no key: the SDK then refuses the call itself, which runs
    nothing and records nothing. None (a low-level handler): derived from the arguments as sent.
    """
    argument = getattr(policy, "key_argument", None)
    if argument is not None:
        present = isinstance(arguments, Mapping) and argument in arguments
        stripped = (
            {k: v for k, v in arguments.items() if k != argument}
            if present and arguments is not None
            else arguments
        )
        passes = bool(getattr(policy, "passes_key_argument", False))
        passed = arguments if passes else stripped
        changed = present and not passes
        if sep_key is not None:
            return Bridged(sep_key, SEP, stripped, passed, changed)
        value = arguments.get(argument) if present and arguments is not None else None
        if value is None:
            return Bridged(None, SEP, stripped, passed, changed)
        return Bridged(value, ARGUMENT, stripped, passed, changed)
    names = getattr(policy, "key_from", ())
    if sep_key is not None or not names:
        return Bridged(sep_key, SEP, arguments, arguments, False)
    if not isinstance(arguments, Mapping) or any(n not in arguments for n in names):
        # An operation named by these arguments is not identified without all of them.
        return Bridged(None, SEP, arguments, arguments, False)
    named: Mapping[str, Any] = arguments
    if values is not None:
        try:
            named = values(arguments)
        except Exception:  # the SDK's validation refuses them: it answers, nothing runs
            return Bridged(None, SEP, arguments, arguments, False)
    return Bridged(derived_key(name, names, named), DERIVED, arguments, arguments, False)


def note(name: str, policy: Any) -> None:
    """Add `name` to `BRIDGED` when `policy` has a bridge (a tool registered under a name its
    decorator did not know: found at `install()` or in a `tools/list` answer)."""
    if getattr(policy, "key_argument", None) is not None or bool(getattr(policy, "key_from", ())):
        BRIDGED.add(name)


def derived_key(name: str, names: tuple[str, ...], arguments: Mapping[str, Any]) -> str:
    """`derived:` + a digest of the tool's name and the named arguments' canonical values.

    The tool's name is part of it: two tools deriving from equal values are two operations,
    not a conflict. Values that cannot be compared as JSON give a placeholder key: the
    engine's fingerprint refuses the same arguments (`idempotency_arguments_invalid`), so
    such a call is refused, never run unprotected nor merged with another.
    """
    try:
        text = canonicalize([name, {n: arguments[n] for n in names}])
    except CanonicalizationError:
        return _DERIVED_KEY_PREFIX + "uncomparable"
    return _DERIVED_KEY_PREFIX + hashlib.sha256(text).hexdigest()[:_DIGEST_CHARS]


def derived_scope(scope: str) -> str:
    """The scope under which a derived key's record lives: the caller's scope hash, moved to
    a namespace no client-sent key reaches. A scope hash is 64 hex digits; this is longer,
    so the (scope, key) pair of a derived record can never equal a client-sent key's, for any
    key text (stores keep scope and key apart: columns, or a length-prefixed hash)."""
    return _DERIVED_SCOPE_PREFIX + scope


def header_token(argument: str) -> str:
    """The `x-mcp-header` token for a key argument: `idempotency_key` → `Idempotency-Key`
    (so clients mirror it as `Mcp-Param-Idempotency-Key`; hyphens, since some proxies drop
    header names with underscores)."""
    return "-".join(part[:1].upper() + part[1:] for part in argument.split("_") if part)


def with_key_argument(schema: object, policy: Any) -> object:
    """A tool's input schema with the key argument added (a new dict; `schema` untouched).

    The property is optional (never in `required`); a property of that name the function
    declared itself is replaced by the key argument's (it is the same value: a string).
    `key_header=True` adds `x-mcp-header`. A schema that is not an object schema is left as
    it is: the bridge then only reads the argument if a client sends it.
    """
    argument = getattr(policy, "key_argument", None)
    if argument is None or not isinstance(schema, Mapping):
        return schema
    properties = schema.get("properties")
    prop: dict[str, Any] = {
        "type": "string",
        "minLength": 1,
        "description": KEY_ARGUMENT_DESCRIPTION,
    }
    if getattr(policy, "key_header", False):
        prop["x-mcp-header"] = header_token(argument)
    out = dict(schema)
    out["properties"] = {**(properties if isinstance(properties, Mapping) else {}), argument: prop}
    required = schema.get("required")
    if isinstance(required, list) and argument in required:
        out["required"] = [r for r in required if r != argument]
    return out


def key_sources(policy: Any) -> list[KeySource]:
    """The key sources a tool accepts, in the order they win: always the SEP field first."""
    if getattr(policy, "key_argument", None) is not None:
        return [SEP, ARGUMENT]
    if getattr(policy, "key_from", ()):
        return [SEP, DERIVED]
    return [SEP]


def asks_for(func: Callable[..., Any], argument: str) -> bool:
    """Whether `func`'s signature has a parameter named `argument` (then it is passed)."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    param = parameters.get(argument)
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def missing_names(func: Callable[..., Any], names: tuple[str, ...]) -> list[str]:
    """`key_from` names that are no parameter of `func` (a typo would derive from nothing)."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return []
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return []
    return [n for n in names if n not in parameters]
