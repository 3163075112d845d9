"""idemtools: safe retries for MCP tool servers (SEP-3182 request idempotency).

Tool authors mark tools with `@idempotent(...)`; operators call `install(server, store=...)`;
clients send `idempotencyKey` beside `arguments` on `tools/call`. A retry of a call whose answer
was lost is then replayed instead of executed twice.
"""

from __future__ import annotations

from .canonical import CanonicalizationError, canonicalize, fingerprint
from .engine import Engine, EngineStats, ToolCall
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
    QuotaExceededError,
    RecordCorruptError,
    RefusedError,
    ScopeUnavailableError,
    StoreFullError,
    StoreUnavailableError,
    UnauthorizedError,
)
from .installation import Installation, ToolPolicy, install, installation_of
from .outcome import Outcome
from .policy import (
    DEFAULT_POLICY,
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
from .telemetry import OnOutcome, OutcomeContext

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
    "OnOutcome",
    "Outcome",
    "OutcomeContext",
    "OutcomeNotKeptError",
    "OutcomeTooLargeError",
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
