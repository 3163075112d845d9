"""What the proxy lets in from a client: a message it can parse and check, or its own answer.

A keyed `tools/call` must never reach the upstream unless the engine decided it. A message the
proxy cannot read may still be read by the upstream (the Python and Node SDKs decode invalid
UTF-8 with replacement), so whatever the proxy cannot parse is answered here, never relayed:

- not strict JSON in UTF-8 (invalid UTF-8, a BOM, NaN, a number out of range, arrays and
  objects nested deeper than 1024 on any Python version): `-32700` Parse error, with the id
  when a lenient reading finds one;
- a repeated member name in a message that mentions `idempotencyKey` (parsers disagree on
  which one wins): `-32600` Invalid Request;
- a `tools/call` whose `params` is not an object (the proxy cannot tell whether it is keyed):
  `-32602` Invalid params;
- a keyed `tools/call` without a usable id (a string or a number), or whose `name` is not a
  string or `arguments` not an object: `-32600` / `-32602`. The key itself is checked by the
  engine (`idempotency_key_invalid`), so it is never relayed either.

Batches: an entry that breaks these rules, and a nested batch, get their error in the batch's
response (see `batch`). Both transports call `admit` and `refusal`: the rules are written once.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson

from .jsonread import needs_exact

__all__ = [
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "PARSE_ERROR",
    "Refused",
    "admit",
    "error_response",
    "refusal",
]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
KEY = "idempotencyKey"
# orjson's nesting limit; the fallback parser's own limit depends on the Python version.
MAX_DEPTH = 1024
_KEY_BYTES = KEY.encode()
_TYPES = {
    PARSE_ERROR: "parse_error",
    INVALID_REQUEST: "invalid_request",
    INVALID_PARAMS: "invalid_params",
}


class Refused:
    """A client message the proxy answers itself: `response` is the JSON-RPC error response."""

    __slots__ = ("response",)

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response


class _Unparseable(Exception):
    pass


def error_response(rid: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response of the proxy's own, with `error.data.type`."""
    data = {"type": _TYPES.get(code, "invalid_request")}
    error = {"code": code, "message": message, "data": data}
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Unparseable(text)
    return value


def _constant(text: str) -> Any:
    raise _Unparseable(text)  # NaN, Infinity: not JSON


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _Repeated
    return out


class _Repeated(Exception):
    pass


def parse(data: bytes) -> Any:
    """The JSON value of one message, read strictly (RFC 8259 in UTF-8); raises ValueError."""
    if not needs_exact(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    # orjson reads integers beyond 64 bits as floats and refuses lone surrogate escapes, which
    # JSON allows: the standard library reads those, exactly, with the strict checks on top.
    try:
        text = data.decode("utf-8")
        value = json.loads(text, parse_constant=_constant, parse_float=_finite)
    except (ValueError, RecursionError, _Unparseable) as exc:
        raise ValueError(str(exc)) from None
    if _deeper_than(value, MAX_DEPTH):
        raise ValueError(f"nesting deeper than {MAX_DEPTH}")
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest deeper than `limit` (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


def _repeats(data: bytes) -> bool:
    try:
        json.loads(data.decode("utf-8"), object_pairs_hook=_no_repeats)
    except _Repeated:
        return True
    except (ValueError, RecursionError):
        return False
    return False


def _lenient_id(data: bytes) -> Any:
    """The id of a message the proxy cannot parse, read as a lenient upstream would (or None)."""
    try:
        message = json.loads(data.decode("utf-8", "replace"), strict=False)
    except (ValueError, RecursionError):
        return None
    rid = message.get("id") if isinstance(message, dict) else None
    return rid if _usable_id(rid) else None


def _usable_id(rid: Any) -> bool:
    return isinstance(rid, (str, int, float)) and not isinstance(rid, bool)


def admit(data: bytes) -> Any:
    """The parsed message, or `Refused` with the proxy's answer (see the module's rules).

    `data` is one whole message (a stdio line, an HTTP body), blank lines excluded."""
    try:
        message = parse(data)
    except ValueError:
        return Refused(error_response(_lenient_id(data), PARSE_ERROR, "Parse error"))
    marked = _KEY_BYTES in data or b"\\u" in data
    if marked and isinstance(message, (dict, list)) and _repeats(data):
        rid = message.get("id") if isinstance(message, dict) else None
        echo = rid if _usable_id(rid) else None
        return Refused(
            error_response(echo, INVALID_REQUEST, "Invalid Request: a member name is repeated")
        )
    if isinstance(message, dict):
        refused = refusal(message)
        if refused is not None:
            return Refused(refused)
    return message


def refusal(message: Any) -> dict[str, Any] | None:
    """The proxy's error response to one message or batch entry it must not relay, or None.

    None for everything the proxy relays or decides; not an object: a batch entry, handled
    by the batch rules."""
    if isinstance(message, list):
        return error_response(None, INVALID_REQUEST, "Invalid Request: a nested batch")
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    rid = message.get("id")
    echo = rid if _usable_id(rid) else None
    if "params" in message and not isinstance(message["params"], dict):
        return error_response(echo, INVALID_PARAMS, "Invalid params: params must be an object")
    params = message.get("params")
    if not isinstance(params, dict) or params.get(KEY) is None:
        return None
    if params.get("requestState") is not None or params.get("inputResponses") is not None:
        return None  # an MRTR continuation: outside SEP-3182, relayed
    if not _usable_id(rid):
        return error_response(None, INVALID_REQUEST, "Invalid Request: a keyed call needs an id")
    arguments = params.get("arguments")
    if not isinstance(params.get("name"), str) or not (
        arguments is None or isinstance(arguments, dict)
    ):
        return error_response(
            rid, INVALID_PARAMS, "Invalid params: name must be a string, arguments an object"
        )
    return None
