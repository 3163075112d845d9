"""What a `tools/call` produced, in the SDK-neutral JSON form the stores keep and replay.

An outcome is either the JSON of the result object (a `CallToolResult`, an `isError` result, or
a task-creation result) or the JSON-RPC error object (`code`, `message`, `data`). Adapters build
it from the SDK's answer and turn it back into that answer on replay, so a replay is identical on
the wire. Stored as JSON, never pickle: a record is data, not code.

The stored bytes are versioned (`"v"`), and every store keeps them as they are, so the version
is the record format's:

    v 1   {"v":1,"result":{...}} or {"v":1,"error":{...}}   an outcome (written by orjson)
    v 2   the same, written by the standard `json` (integers beyond 64 bits, lone surrogates)
    v 3   {"v":3,"kind":"not_kept","bytes":N}                a tombstone: the call ran, the store
                                                              had no room for its N-byte outcome

A reader refuses any other version and any v 3 kind it does not know (the engine answers
`idempotency_record_corrupt`, and never runs the tool again). Outcomes are written as v 1 or
v 2 and replayed byte for byte as they were recorded; a tombstone is v 3, so a reader that knows
only v 1 and v 2 refuses it the same way rather than running the call again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from .errors import OutcomeNotKeptError

__all__ = ["TOMBSTONE_RESERVE", "Outcome", "is_tombstone", "tombstone"]

_VERSION = 1
_EXACT = 2
_MARKER = 3
_EXACT_PREFIX = b'{"v":2,'
_MARKER_PREFIX = b'{"v":3,'
_NOT_KEPT = "not_kept"

TOMBSTONE_RESERVE = 64
"""Bytes a tombstone takes at most: what a store with a byte budget keeps free for each claim,
so that a completion always fits, as its outcome or as a tombstone."""


def tombstone(size: int) -> bytes:
    """The record kept in place of an outcome of `size` bytes that did not fit the budget."""
    data = orjson.dumps({"v": _MARKER, "kind": _NOT_KEPT, "bytes": int(size)})
    assert len(data) <= TOMBSTONE_RESERVE
    return data


def is_tombstone(data: bytes) -> bool:
    """True for the bytes `tombstone()` makes (stores count them; tests look)."""
    if not data.startswith(_MARKER_PREFIX):
        return False
    try:
        body = orjson.loads(data)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("kind") == _NOT_KEPT


@dataclass(frozen=True, slots=True)
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

    @classmethod
    def of_value(cls, value: Any, *, is_error: bool = False) -> Outcome:
        """A `CallToolResult` outcome from what a tool function would have returned.

        For `reconcile` functions (`Policy.on_lapse`), which answer with the outcome a call
        would have had: a `str` becomes one text block; a dict also becomes the result's
        `structuredContent`; any other JSON value is its JSON text. The shape follows the
        SDKs' own conversion of a plain return value, so a replay of a reconciled outcome
        reads like a replay of the tool's own. A dict that already is a result (it has
        `content`) is taken as it is.
        """
        if isinstance(value, dict) and isinstance(value.get("content"), list):
            return cls(result=dict(value))
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        if isinstance(value, dict):
            result["structuredContent"] = value
        result["isError"] = is_error
        return cls(result=result)

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
    def from_bytes(cls, data: bytes, *, key: object = None) -> Outcome:
        """Decode a stored outcome.

        Raises:
            OutcomeNotKeptError: the record is a tombstone (the call ran; its outcome was not
                kept), carrying `key` for the client's `error.data`.
            ValueError: anything this release cannot read (not JSON, an unknown version or
                kind): the record is corrupt, never a reason to run the tool again.
        """
        try:
            body = json.loads(data) if data.startswith(_EXACT_PREFIX) else orjson.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
            raise ValueError(f"stored outcome is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise ValueError("stored outcome has an unknown layout")
        version = body.get("v")
        if version == _MARKER:
            if body.get("kind") == _NOT_KEPT:
                raise OutcomeNotKeptError(
                    "the original call ran, but the idempotency store had no room to keep its "
                    "answer; it will not run again under this key",
                    key=key,
                )
            raise ValueError(
                f"stored record has a kind this release does not know: {body.get('kind')!r}"
            )
        if version not in (_VERSION, _EXACT):  # compared by value: 1.0 reads as 1
            raise ValueError(
                f"stored record has a format version this release does not know: {version!r}"
            )
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
