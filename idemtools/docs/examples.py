"""Minimal valid `arguments` from a tool's JSON Schema, for the page's example request.

Deterministic (same schema, same example), so a generated page only changes when the server
does. The one private stdlib module it uses, the regex parser behind `re`, is reached through
`regex_parser()`, which fails loudly when a Python release moves it.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .errors import DocsError

__all__ = ["EXAMPLE_KEY", "example_arguments", "regex_parser"]

EXAMPLE_KEY = "5f0c6f0e-2d4b-4c8e-9a51-8b7f3c2e1d90"
"""A fixed key for the examples: a random one would make every build differ."""

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


_PARSER_MODULE = "re._parser" if sys.version_info >= (3, 11) else "sre_parse"


def regex_parser() -> ModuleType:
    """The stdlib's regex parser (`re._parser`; `sre_parse` before 3.11), with its `parse`.

    Private to CPython, so the one place that reaches it: if a release renames or drops it,
    building an example for a `pattern` raises `DocsError` naming it, instead of every
    example quietly falling back to a placeholder the schema refuses.
    """
    try:
        parser = importlib.import_module(_PARSER_MODULE)
    except ImportError as exc:
        raise DocsError(
            f"idemtools.docs needs the stdlib's private regex parser {_PARSER_MODULE!r} to build "
            f"examples for string patterns, and this Python ({sys.version.split()[0]}) has "
            "none: please report it to idemtools"
        ) from exc
    if not callable(getattr(parser, "parse", None)):
        raise DocsError(
            f"idemtools.docs needs {_PARSER_MODULE}.parse (the stdlib's private regex parser) "
            f"to build examples for string patterns; this Python ({sys.version.split()[0]}) "
            "has changed it: please report it to idemtools"
        )
    return parser


def _shortest_match(pattern: str) -> str | None:
    """A short string `pattern` matches, read off the regex's parse tree; None if unsure.

    By hand because the libraries that do this (exrex, rstr) are random or unmaintained and
    would be a runtime dependency for one docs example; the caller checks the result matches.
    """
    parser = regex_parser()  # outside the try: a missing parser is an error, not "unsure"
    try:
        tree: Any = parser.parse(pattern)  # a SubPattern: a sequence of (op, argument)
        return _emit(list(tree))
    except Exception:
        return None
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
