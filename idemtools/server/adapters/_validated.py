"""The values a decorated tool's function receives, for a derived key (`key_from`).

Why: `key_from` names an operation by argument values, so two spellings the SDK's validation
turns into the same value (`"100"`, `"1e2"` and `100` for `amount: float`) must derive the same
key, and then meet as a conflict, as they do under the SEP key. The SDK's own validation is
reused (FastMCP on mcp 1.x, MCPServer on mcp 2.x: the tool's `fn_metadata`; FastMCP 4.x:
`sdk_fastmcp.function_validator`), so the key sees exactly what the function would. Shared by
every line; imports pydantic only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import to_jsonable_python

__all__ = ["Values", "jsonable", "validator_of"]

Values = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def validator_of(tool: Any) -> Values | None:
    """`values(arguments)` for a decorated tool: its validated arguments as JSON values; it
    raises what the SDK's validation raises. None: no validation to reuse (a low-level
    handler): the key derives from the arguments as sent."""
    meta = getattr(tool, "fn_metadata", None)
    model = getattr(meta, "arg_model", None)
    if meta is None or model is None:
        return None

    def values(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        validate = getattr(meta, "validate_arguments", None)
        if callable(validate):  # mcp 2.x
            parsed: Mapping[str, Any] = validate(dict(arguments))
        else:  # mcp 1.x: what `call_fn_with_arg_validation` does before the call
            pre = meta.pre_parse_json(dict(arguments))
            parsed = model.model_validate(pre).model_dump_one_level()
        return jsonable(parsed)

    return values


def jsonable(parsed: Mapping[str, Any]) -> dict[str, Any]:
    """Validated values as JSON values (a model as its fields, `100.0` as a number). A value
    with no JSON form stays as it is: `bridges.derived_key` then gives its placeholder for
    uncomparable values, so the call stays keyed (it never runs unkeyed for that)."""
    out: dict[str, Any] = {}
    for name, value in parsed.items():
        try:
            out[name] = to_jsonable_python(value)
        except Exception:
            out[name] = value
    return out
