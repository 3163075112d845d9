"""idemtools: safe retries for MCP tool servers (SEP-3182 request idempotency).

Tool authors mark tools with `@idempotent(...)`; operators call `install(server, store=...)`;
clients send `idempotencyKey` beside `arguments` on `tools/call`. A retry of a call whose answer
was lost is then replayed instead of executed twice.

Every name here is loaded on first use (`__getattr__`), so that `import idemtools.client` (which
runs this file first) loads only the client side: no engine, store or server adapter.
`from idemtools import X` works for every name in `__all__`, and type checkers read the imports
under `TYPE_CHECKING` below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .canonical import CanonicalizationError, canonicalize, fingerprint
    from .engine import Engine, EngineStats, ToolCall
    from .engine.telemetry import OnOutcome, OutcomeContext
    from .errors import (
        ArgumentsInvalidError,
        ConflictError,
        ErrorCodes,
        IdempotencyError,
        IdempotencyNotSupportedError,
        InProgressError,
        InstallError,
        KeyInvalidError,
        OutcomeNotKeptError,
        OutcomeTooLargeError,
        OutcomeUnknownError,
        QuotaExceededError,
        RecordCorruptError,
        RefusedError,
        ScopeUnavailableError,
        StoreFullError,
        StoreUnavailableError,
        UnauthorizedError,
    )
    from .outcome import Outcome
    from .policy import (
        DEFAULT_POLICY,
        LapsedCall,
        Policy,
        PolicyConflictError,
        Registry,
        default_registry,
        idempotent,
        policy_of,
    )
    from .scopes import (
        AuthInfo,
        CallContext,
        Scope,
        by_auth_subject,
        by_client_id,
        local_transport,
        local_user,
        per_session,
        scope,
        shared,
    )
    from .server.installation import Installation, ToolPolicy, install, installation_of

_LAZY: dict[str, str] = {
    "CanonicalizationError": "canonical",
    "canonicalize": "canonical",
    "fingerprint": "canonical",
    "Engine": "engine",
    "EngineStats": "engine",
    "ToolCall": "engine",
    "ArgumentsInvalidError": "errors",
    "ConflictError": "errors",
    "ErrorCodes": "errors",
    "IdempotencyError": "errors",
    "IdempotencyNotSupportedError": "errors",
    "InProgressError": "errors",
    "InstallError": "errors",
    "KeyInvalidError": "errors",
    "OutcomeNotKeptError": "errors",
    "OutcomeTooLargeError": "errors",
    "OutcomeUnknownError": "errors",
    "QuotaExceededError": "errors",
    "RecordCorruptError": "errors",
    "RefusedError": "errors",
    "ScopeUnavailableError": "errors",
    "StoreFullError": "errors",
    "StoreUnavailableError": "errors",
    "UnauthorizedError": "errors",
    "Installation": "server.installation",
    "ToolPolicy": "server.installation",
    "install": "server.installation",
    "installation_of": "server.installation",
    "Outcome": "outcome",
    "DEFAULT_POLICY": "policy",
    "LapsedCall": "policy",
    "Policy": "policy",
    "PolicyConflictError": "policy",
    "Registry": "policy",
    "default_registry": "policy",
    "idempotent": "policy",
    "policy_of": "policy",
    "AuthInfo": "scopes",
    "CallContext": "scopes",
    "Scope": "scopes",
    "by_auth_subject": "scopes",
    "by_client_id": "scopes",
    "local_transport": "scopes",
    "local_user": "scopes",
    "per_session": "scopes",
    "scope": "scopes",
    "shared": "scopes",
    "OnOutcome": "engine.telemetry",
    "OutcomeContext": "engine.telemetry",
}
"""Public name → the module (in this package) that defines it."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_POLICY",
    "ArgumentsInvalidError",
    "AuthInfo",
    "CallContext",
    "CanonicalizationError",
    "ConflictError",
    "Engine",
    "EngineStats",
    "ErrorCodes",
    "IdempotencyError",
    "IdempotencyNotSupportedError",
    "InProgressError",
    "InstallError",
    "Installation",
    "KeyInvalidError",
    "LapsedCall",
    "OnOutcome",
    "Outcome",
    "OutcomeContext",
    "OutcomeNotKeptError",
    "OutcomeTooLargeError",
    "OutcomeUnknownError",
    "Policy",
    "PolicyConflictError",
    "QuotaExceededError",
    "RecordCorruptError",
    "RefusedError",
    "Registry",
    "Scope",
    "ScopeUnavailableError",
    "StoreFullError",
    "StoreUnavailableError",
    "ToolCall",
    "ToolPolicy",
    "UnauthorizedError",
    "by_auth_subject",
    "by_client_id",
    "canonicalize",
    "default_registry",
    "fingerprint",
    "idempotent",
    "install",
    "installation_of",
    "local_transport",
    "local_user",
    "per_session",
    "policy_of",
    "scope",
    "shared",
]
