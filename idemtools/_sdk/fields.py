"""Declaring `idempotencyKey` on an SDK's `CallToolRequestParams` (both lines share this).

The field is typed `str | None` for the code that reads it, but validated leniently: a non-string
key sent by a client is kept as an `InvalidKey` (a `str` carrying the raw value) instead of making
the SDK reject the whole request with a generic "Invalid request parameters". idemtools then
refuses it with its own `idempotency_key_invalid` error, as docs/contract.md requires.

Pydantic compiles nested models into their parents, so after adding the field every model that
embeds the params class must be rebuilt, leaf first; a partial rebuild silently drops the key
when a client serializes the request. The caller passes that chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic.fields import FieldInfo

__all__ = ["FIELD", "WIRE_NAME", "InvalidKey", "advertise", "declare", "read_key"]

FIELD = "idempotency_key"
WIRE_NAME = "idempotencyKey"


class InvalidKey(str):
    """A key that was not a string on the wire; `raw` is what the client sent."""

    raw: object


def _keep_invalid(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        kept = InvalidKey(json.dumps(value, default=repr)[:300])
        kept.raw = value
        return kept


KeyType = Annotated[str | None, WrapValidator(_keep_invalid)]


def declare(params_cls: Any, rebuild: Sequence[Callable[[], object]]) -> None:
    """Add the typed, aliased field to `params_cls` (once), then run the rebuild chain."""
    fields: dict[str, FieldInfo] = params_cls.__pydantic_fields__
    if FIELD in fields:
        return  # declared (and rebuilt) already: rebuilding costs milliseconds, do it once
    fields[FIELD] = FieldInfo.from_annotated_attribute(
        KeyType,  # type: ignore[arg-type]  # an Annotated form, which pydantic accepts
        Field(default=None, alias=WIRE_NAME),
    )
    params_cls.__annotations__[FIELD] = KeyType
    for step in rebuild:
        step()


def read_key(params: Any) -> object:
    """The key on parsed params, declared or not; `InvalidKey` unwraps to the raw value."""
    key = getattr(params, FIELD, None)
    if key is None:
        extra = getattr(params, "model_extra", None) or {}
        key = extra.get(WIRE_NAME)
    if isinstance(key, InvalidKey):
        return key.raw
    return key


def advertise(result: Any) -> Any:
    """`capabilities.tools.idempotency` on a serialized `initialize` / `server/discover` result.

    On the wire form, because the SDKs' typed capability models drop keys they do not know.
    """
    if isinstance(result, dict):
        caps = result.get("capabilities")
        if isinstance(caps, dict) and isinstance(caps.get("tools"), dict):
            caps["tools"] = {**caps["tools"], "idempotency": {}}
    return result
