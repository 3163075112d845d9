"""Every error idemtools raises or sends, in one place.

    IdempotencyError                      root: anything idemtools refuses or fails at
    ├── RefusedError                      a keyed call refused before the tool ran (sent to clients)
    │   ├── KeyInvalidError               idempotency_key_invalid
    │   ├── ArgumentsInvalidError         idempotency_arguments_invalid
    │   ├── InProgressError               idempotency_key_in_progress (carries retry_after_ms)
    │   ├── ConflictError                 idempotency_key_conflict
    │   ├── ScopeUnavailableError         idempotency_scope_unavailable
    │   ├── UnauthorizedError             idempotency_unauthorized (the tool's authorize= refused)
    │   ├── StoreFullError                idempotency_store_full
    │   ├── QuotaExceededError            idempotency_quota_exceeded
    │   ├── StoreUnavailableError         idempotency_store_unavailable
    │   ├── RecordCorruptError            idempotency_record_corrupt
    │   ├── OutcomeTooLargeError          idempotency_outcome_too_large (replayed in its place)
    │   ├── OutcomeNotKeptError           idempotency_outcome_not_kept (the store had no room)
    │   └── OutcomeUnknownError           idempotency_outcome_unknown (it may have run; unknown)
    ├── InstallError                      install() could not make a server safe
    └── IdempotencyNotSupportedError      client side: the server does not advertise the capability

Errors expose plain attributes, so printing one or reading it in a debugger shows values, never
bound methods: every `RefusedError` has `type`, `message`, `key` and `data` (the `error.data`
a client receives), `InProgressError` also `retry_after_ms`; `IdempotencyNotSupportedError`
has `message` and `tool`.

`data.notProcessed: true` (the MCP transports working group's error-registry draft: "this
request provably had no effect") is on every refusal where the tool did not run for this request
and the operation's state is not unknown (`RefusedError.not_processed`); never on a replay, nor
on the refusals that stand for a call that ran or may have run (outcome unknown, not kept, too
large, record corrupt). Clients read it as a hint only: `error.data.type` decides.

Clients are meant to read `error.data.type`; the JSON-RPC codes are configurable
(`ErrorCodes`) because the SEP defines none. Store implementations raise `StoreFullError`,
`QuotaExceededError` and `StoreUnavailableError` (chained `from` the driver's exception) and
nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "NOT_PROCESSED",
    "ArgumentsInvalidError",
    "ConflictError",
    "ErrorCodes",
    "IdempotencyError",
    "IdempotencyNotSupportedError",
    "InProgressError",
    "InstallError",
    "KeyInvalidError",
    "OutcomeNotKeptError",
    "OutcomeTooLargeError",
    "OutcomeUnknownError",
    "QuotaExceededError",
    "RecordCorruptError",
    "RefusedError",
    "ScopeUnavailableError",
    "StoreFullError",
    "StoreUnavailableError",
    "UnauthorizedError",
    "error_from_data",
]

INVALID_PARAMS = -32602

NOT_PROCESSED = "notProcessed"
"""The `error.data` member saying the request provably had no effect (a hint for clients)."""


@dataclass(frozen=True)
class ErrorCodes:
    """JSON-RPC error codes per `error.data.type`.

    The SEP fixes only `error.data.type`; the codes are ours, and clients should read the
    type, not the code. One set for every protocol era. Defaults lie outside -32768..-32000,
    as the MCP specification (2026-07-28, "Error Codes") asks of application codes: it reserves
    -32020..-32099 for codes it defines and calls -32000..-32019 legacy. The exception is
    -32602, JSON-RPC's own "Invalid params", for an invalid key or invalid arguments.
    """

    idempotency_key_invalid: int = INVALID_PARAMS
    idempotency_arguments_invalid: int = INVALID_PARAMS
    idempotency_key_in_progress: int = -31051
    idempotency_key_conflict: int = -31052
    idempotency_scope_unavailable: int = -31053
    idempotency_store_full: int = -31054
    idempotency_store_unavailable: int = -31055
    idempotency_record_corrupt: int = -31056
    idempotency_outcome_too_large: int = -31057
    idempotency_quota_exceeded: int = -31058
    idempotency_unauthorized: int = -31059
    idempotency_outcome_not_kept: int = -31060
    idempotency_outcome_unknown: int = -31061

    def code_for(self, error_type: str) -> int:
        code = getattr(self, error_type, None)
        return code if isinstance(code, int) else -32603


class IdempotencyError(Exception):
    """Root of every idemtools error."""


class InstallError(IdempotencyError):
    """`install()` could not make the server safe; it refuses rather than leave it unprotected."""


class IdempotencyNotSupportedError(IdempotencyError):
    """Client side: the server does not advertise `capabilities.tools.idempotency`.

    Raised by `idemtools.client.call_tool` before anything is sent. Such a server ignores the
    key, so a retry may run the tool twice; the SEP says a client that relies on deduplication
    SHOULD check the capability. Pass `require_capability=False` to send the call anyway.
    """

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.tool = tool


class RefusedError(IdempotencyError):
    """A keyed call refused before its tool ran; becomes a JSON-RPC error with `data.type`."""

    type: ClassVar[str] = "idempotency_error"
    not_processed: bool = False
    """True when the tool provably did not run for this request (`data.notProcessed`); a class
    default, set False on an instance whose tool did run (a transaction rolled back)."""

    def __init__(self, message: str, *, key: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.key = key

    @property
    def data(self) -> dict[str, Any]:
        """The `error.data` object sent to the client (a plain dict, built from the attributes)."""
        data: dict[str, Any] = {"type": self.type, "idempotencyKey": _truncate(self.key)}
        if self.not_processed:
            data[NOT_PROCESSED] = True
        return data

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, data={self.data!r})"


class KeyInvalidError(RefusedError):
    """The key is not a string of 1..max characters."""

    type = "idempotency_key_invalid"
    not_processed = True


class ArgumentsInvalidError(RefusedError):
    """The arguments are not JSON (NaN, infinity): they cannot be compared, so not deduplicated."""

    type = "idempotency_arguments_invalid"
    not_processed = True


class InProgressError(RefusedError):
    """A call with this key is still running; retry after `retry_after_ms`."""

    type = "idempotency_key_in_progress"
    not_processed = True

    def __init__(self, message: str, *, key: object = None, retry_after_ms: int = 0) -> None:
        super().__init__(message, key=key)
        self.retry_after_ms = retry_after_ms

    @property
    def data(self) -> dict[str, Any]:
        return {**super().data, "retryAfterMs": self.retry_after_ms}


class ConflictError(RefusedError):
    """The key was used before with another tool name or other arguments."""

    type = "idempotency_key_conflict"
    not_processed = True


class ScopeUnavailableError(RefusedError):
    """The tool's scope cannot be determined for this request (e.g. HTTP without a token)."""

    type = "idempotency_scope_unavailable"
    not_processed = True


class UnauthorizedError(RefusedError):
    """The tool's `authorize=` check refused the caller: no record was read or written.

    Sent with a fixed message: what the check raised stays on the server (it may name
    permissions or other callers), and is logged there.
    """

    type = "idempotency_unauthorized"
    not_processed = True


class StoreFullError(RefusedError):
    """The store is at its bound (live records or bytes); records are never dropped early."""

    type = "idempotency_store_full"
    not_processed = True


class QuotaExceededError(RefusedError):
    """This caller's scope holds its maximum of live records (`max_records_per_scope`).

    Separate from `StoreFullError` on purpose: a quota refusal concerns one caller (typically
    one flooding unique keys) while every other scope keeps claiming; a full store concerns
    everyone. Nothing ran; a retry with the same key succeeds once the scope's older records
    expire, so clients treat it like `idempotency_store_full` (retry later, not at once).
    """

    type = "idempotency_quota_exceeded"
    not_processed = True


class StoreUnavailableError(RefusedError):
    """The store could not be reached or failed; fail closed, the tool does not run.

    A store's message is for the operator's log (it may name hosts, files or the driver's
    words); the engine sends clients a generic message instead, or `client_message` when the
    store set one that is safe to show (e.g. why an evicting Redis is refused).
    """

    type = "idempotency_store_unavailable"
    not_processed = True

    def __init__(
        self, message: str, *, key: object = None, client_message: str | None = None
    ) -> None:
        super().__init__(message, key=key)
        self.client_message = client_message


class RecordCorruptError(RefusedError):
    """The stored record for this key cannot be read; the tool does not run a second time."""

    type = "idempotency_record_corrupt"


class OutcomeTooLargeError(RefusedError):
    """The original call ran, but its outcome exceeded the size limit and was not kept.

    Recorded in the outcome's place, so a retry gets this error instead of a second execution.
    """

    type = "idempotency_outcome_too_large"


class OutcomeNotKeptError(RefusedError):
    """The original call ran, but the store had no room left in its byte budget to keep its
    outcome: a small tombstone was kept instead, so a retry gets this error and the tool
    never runs a second time under the key."""

    type = "idempotency_outcome_not_kept"


class OutcomeUnknownError(RefusedError):
    """The call may have run, and its end was never recorded: whether its side effect happened
    is unknown (the server or its upstream died mid-call, or the tool outlived `max_runtime`).

    Definite for the key: an equal retry gets this same answer and runs nothing, so the
    application, never a retry loop, decides whether to act again under a new key (after
    checking whether the effect happened).
    """

    type = "idempotency_outcome_unknown"


_BY_TYPE: dict[str, type[RefusedError]] = {
    cls.type: cls
    for cls in (
        KeyInvalidError,
        ArgumentsInvalidError,
        InProgressError,
        ConflictError,
        ScopeUnavailableError,
        UnauthorizedError,
        StoreFullError,
        QuotaExceededError,
        StoreUnavailableError,
        RecordCorruptError,
        OutcomeTooLargeError,
        OutcomeNotKeptError,
        OutcomeUnknownError,
    )
}


def error_from_data(message: str, data: object) -> RefusedError | None:
    """Rebuild the typed error from a JSON-RPC `error.data` (client side); None if not ours."""
    if not isinstance(data, dict):
        return None
    cls = _BY_TYPE.get(str(data.get("type")))
    if cls is None:
        return None
    key = data.get("idempotencyKey")
    error: RefusedError
    if cls is InProgressError:
        retry = data.get("retryAfterMs")
        error = InProgressError(
            message, key=key, retry_after_ms=retry if isinstance(retry, int) else 0
        )
    else:
        error = cls(message, key=key)
    # What the server said, as a hint: the type alone decides what a client does next.
    error.not_processed = data.get(NOT_PROCESSED) is True
    return error


_KEY_ECHO_MAX = 64


def _truncate(key: object) -> object:
    """Echo what was sent, but never more than a few dozen characters of it."""
    if key is None or isinstance(key, (bool, int, float)):
        return key
    text = key if isinstance(key, str) else json.dumps(key, default=repr)
    return text if len(text) <= _KEY_ECHO_MAX else text[:_KEY_ECHO_MAX] + "…"
