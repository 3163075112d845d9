"""What a `tools/call` produced, in the SDK-neutral JSON form the stores keep and replay.

An outcome is either the JSON of the result object (a `CallToolResult`, an `isError` result, or
a task-creation result) or the JSON-RPC error object (`code`, `message`, `data`). Adapters build
it from the SDK's answer and turn it back into that answer on replay, so a replay is identical on
the wire. Stored as JSON, never pickle: a record is data, not code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Outcome"]

_VERSION = 1
_EXACT = 2
_EXACT_PREFIX = b'{"v":2,'


@dataclass(frozen=True)
class Outcome:
    """A result or an error, as JSON.

    Attributes:
        result: the result object's JSON, when the call answered with a result.
        error: the JSON-RPC error object, when it answered with an error.
        final: False for answers that are not the end of the operation (MRTR
            `input_required`): those are never recorded, and the claim is released.
        replayed: True when this came from a store rather than from running the tool.
    """

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    final: bool = True
    replayed: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if (self.result is None) == (self.error is None):
            raise ValueError("an Outcome holds exactly one of result or error")

    @classmethod
    def of_error(cls, code: int, message: str, data: Any = None) -> Outcome:
        """A JSON-RPC error outcome; `data` is omitted when None, as JSON-RPC allows."""
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return cls(error=error)

    @property
    def is_error(self) -> bool:
        """True for a JSON-RPC error (an `isError` tool result is a result, not an error)."""
        return self.error is not None

    def to_bytes(self) -> bytes:
        """The stored form: JSON. orjson for speed; the standard encoder for what orjson
        refuses (integers beyond 64 bits, lone surrogates), so every JSON value is kept."""
        body: dict[str, Any] = {"v": _VERSION}
        if self.result is not None:
            body["result"] = self.result
        else:
            body["error"] = self.error
        try:
            return orjson.dumps(body)
        except TypeError:
            # Layout 2: written by `json`, and read back by it (orjson reads big ints as floats).
            body["v"] = _EXACT
            return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Outcome:
        """Decode a stored outcome; raises ValueError for anything that is not one."""
        try:
            body = json.loads(data) if data.startswith(_EXACT_PREFIX) else orjson.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise ValueError(f"stored outcome is not JSON: {exc}") from None
        if not isinstance(body, dict) or body.get("v") not in (_VERSION, _EXACT):
            raise ValueError("stored outcome has an unknown layout")
        result, error = body.get("result"), body.get("error")
        if isinstance(result, dict) and error is None:
            return cls(result=result, replayed=True)
        if (
            isinstance(error, dict)
            and result is None
            and isinstance(error.get("code"), int)
            and isinstance(error.get("message"), str)
        ):
            return cls(error=error, replayed=True)
        raise ValueError("stored outcome holds neither a result nor an error")
