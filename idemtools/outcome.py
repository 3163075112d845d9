"""What a `tools/call` produced, in the SDK-neutral JSON form the stores keep and replay.

An outcome is either the JSON of the result object (a `CallToolResult`, an `isError` result, or
a task-creation result) or the JSON-RPC error object (`code`, `message`, `data`). Adapters build
it from the SDK's answer and turn it back into that answer on replay, so a replay is identical on
the wire. Stored as JSON, never pickle: a record is data, not code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Outcome"]

_VERSION = 1


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
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        return cls(error=error)

    @property
    def is_error(self) -> bool:
        return self.error is not None

    def to_bytes(self) -> bytes:
        body = (
            {"v": _VERSION, "result": self.result}
            if self.result is not None
            else {
                "v": _VERSION,
                "error": self.error,
            }
        )
        return orjson.dumps(body)

    @classmethod
    def from_bytes(cls, data: bytes) -> Outcome:
        """Decode a stored outcome; raises ValueError for anything that is not one."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"stored outcome is not JSON: {exc}") from None
        if not isinstance(body, dict) or body.get("v") != _VERSION:
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
