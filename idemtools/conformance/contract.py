"""The fixture contract: four tools any MCP server adds so that a black box can count executions.

A client cannot see whether a server executed a tool; it can only see answers. The kit therefore
asks the server under test to expose four small tools that count their own executions per
*label* (any string the kit picks), so that "the duplicate was not executed" becomes an
observable number. The contract is language-neutral on purpose: a TypeScript, Go or Rust server
implements it in a few lines (see docs/conformance.md).

- `sep3182_record {label, payload?, pad?}`: count one execution of `label`; answer its new
  count. With `pad` (optional integer), the answer's object also carries `"pad"`: a string of
  that many `x` (a large outcome; a server without it gets the large-outcome check skipped).
- `sep3182_record_slow {label, ms?, payload?}`: count one execution, sleep `ms` milliseconds,
  then answer the count it recorded (an in-progress call a duplicate can overtake).
- `sep3182_fail {label, payload?}`: count one execution; answer `isError: true` with the count.
- `sep3182_count {label}`: answer the count of `label` without executing anything.
- `sep3182_throw {label, payload?}` (optional: a target without it still gets a report, with the
  JSON-RPC error checks skipped): count one execution, then answer a JSON-RPC *error* (not a
  result) with code `THROW_CODE`, an application code outside the range JSON-RPC and MCP reserve,
  and `data` `{"label": ..., "executions": n}`, the same name the results use (servers written
  when it was `count` still pass: the kit reads either, and says so in a note).

Answers are one text content block holding the JSON object `{"label": ..., "executions": n}`
(a `structuredContent` with the same object is allowed too). `payload` is any JSON value; it is
ignored by the tool and exists so that the kit can vary arguments. Counters are per server
process and shared by every caller; the three counting tools take the server's default
idempotency policy, `sep3182_count` should not be keyed.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "COUNT",
    "FAIL",
    "FIXTURE_TOOLS",
    "OPTIONAL_FIXTURES",
    "RECORD",
    "RECORD_SLOW",
    "SCHEMAS",
    "THROW",
    "THROW_CODE",
    "answer_text",
    "executions_of",
    "throw_count",
    "throw_error",
    "throw_uses_old_field",
]

RECORD = "sep3182_record"
RECORD_SLOW = "sep3182_record_slow"
FAIL = "sep3182_fail"
COUNT = "sep3182_count"
THROW = "sep3182_throw"
FIXTURE_TOOLS = (RECORD, RECORD_SLOW, FAIL, COUNT)  # required: the kit refuses a target without
OPTIONAL_FIXTURES = (THROW,)  # newer: without it, the checks that need it are skipped
THROW_CODE = 1001  # outside -32768..-32000, which JSON-RPC and MCP reserve

_LABEL = {"type": "string", "description": "what to count executions of"}
_PAYLOAD = {"description": "any JSON value; ignored, lets a caller vary the arguments"}
_PAD = {"type": "integer", "minimum": 0, "description": "answer this many more characters"}

SCHEMAS: dict[str, dict[str, Any]] = {
    RECORD: {
        "type": "object",
        "properties": {"label": _LABEL, "payload": _PAYLOAD, "pad": _PAD},
        "required": ["label"],
    },
    RECORD_SLOW: {
        "type": "object",
        "properties": {
            "label": _LABEL,
            "ms": {"type": "integer", "minimum": 0, "description": "sleep before answering"},
            "payload": _PAYLOAD,
        },
        "required": ["label"],
    },
    FAIL: {
        "type": "object",
        "properties": {"label": _LABEL, "payload": _PAYLOAD},
        "required": ["label"],
    },
    COUNT: {"type": "object", "properties": {"label": _LABEL}, "required": ["label"]},
    THROW: {
        "type": "object",
        "properties": {"label": _LABEL, "payload": _PAYLOAD},
        "required": ["label"],
    },
}

DESCRIPTIONS = {
    RECORD: "SEP-3182 conformance fixture: count one execution of `label`, answer the count.",
    RECORD_SLOW: "SEP-3182 conformance fixture: count one execution, sleep `ms`, answer.",
    FAIL: "SEP-3182 conformance fixture: count one execution, answer isError with the count.",
    COUNT: "SEP-3182 conformance fixture: the execution count of `label` (executes nothing).",
    THROW: "SEP-3182 conformance fixture: count one execution, answer a JSON-RPC error.",
}


def answer_text(label: str, executions: int, pad: int = 0) -> str:
    """The text block every fixture answers with (`pad`: a large outcome, on request)."""
    answer: dict[str, Any] = {"label": label, "executions": executions}
    if pad > 0:
        answer["pad"] = "x" * pad
    return json.dumps(answer)


def throw_error(label: str, executions: int) -> dict[str, Any]:
    """The JSON-RPC `error` object `sep3182_throw` answers with."""
    return {
        "code": THROW_CODE,
        "message": f"sep3182_throw: execution {executions} of {label}",
        "data": {"label": label, "executions": executions},
    }


OLD_THROW_FIELD = "count"  # accepted in `sep3182_throw`'s data for `executions`, with a note


def throw_count(error: Any) -> int | None:
    """The execution count in `sep3182_throw`'s JSON-RPC error (`data.executions`, or the
    accepted `data.count`), or None when there is none."""
    data = error.get("data") if isinstance(error, dict) else None
    if not isinstance(data, dict):
        return None
    for name in ("executions", OLD_THROW_FIELD):
        if type(data.get(name)) is int:
            return int(data[name])
    return None


def throw_uses_old_field(error: Any) -> bool:
    """Whether the count came from `data.count` alone (accepted, with a note)."""
    data = error.get("data") if isinstance(error, dict) else None
    return (
        isinstance(data, dict)
        and type(data.get("executions")) is not int
        and type(data.get(OLD_THROW_FIELD)) is int
    )


_EXECUTIONS = re.compile(r'"executions"\s*:\s*(\d+)')


def executions_of(result: Any) -> int | None:
    """The execution count in a fixture's `tools/call` result, or None when there is none.

    Tolerant on purpose: a server may add `structuredContent`, or its SDK may wrap the text of an
    error result ("Error executing tool ...: {...}"); the number is what the contract fixes.
    """
    if not isinstance(result, dict):
        return None
    structured = result.get("structuredContent")
    if isinstance(structured, dict) and type(structured.get("executions")) is int:
        return int(structured["executions"])
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        text = block.get("text") if isinstance(block, dict) else None
        if not isinstance(text, str):
            continue
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and type(parsed.get("executions")) is int:
            return int(parsed["executions"])
        found = _EXECUTIONS.search(text)
        if found:
            return int(found.group(1))
    return None
