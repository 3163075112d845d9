"""What the client helper and `KeyedSession` share: keys, the capability, per-tool metadata.

A module of its own so that `idemtools.client` can offer `KeyedSession` (which builds on these)
without the two importing each other. The SDK line's client half is chosen here once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .adapters import SDK2, patches
from .policy import TOOL_META_KEY

__all__ = ["ToolIdempotency", "advertises_idempotency", "new_key"]

if SDK2:
    from .adapters import mcp2 as _sdk
else:
    from .adapters import mcp1 as _sdk
patches.declare_capability_field()  # read when the session connects; a no-op on mcp 1.x


def new_key() -> str:
    """A fresh key: UUID4, enough entropy that unrelated calls never collide (SEP, Security)."""
    return str(uuid.uuid4())


def advertises_idempotency(session: Any) -> bool:
    """True when the server declared `capabilities.tools.idempotency`.

    Without it, a key is harmless but guarantees nothing: the server may run a retry twice.
    """
    return _sdk.advertises(getattr(session, "session", session) if SDK2 else session)


@dataclass(frozen=True)
class ToolIdempotency:
    """What a server published about one tool in `tools/list` (`_meta[TOOL_META_KEY]`).

    Attributes:
        retention: seconds the server replays a completed answer; a retry after that may run
            the tool again (so `call_tool` stops retrying by then).
        scope: whose records a key can match: "auth_subject", "client_id", "session",
            "shared", "local_user", "custom" or "composite".
    """

    retention: int
    scope: str

    @classmethod
    def from_meta(cls, meta: object) -> ToolIdempotency | None:
        """Read a tool's `_meta`; None when it carries no (well-formed) idemtools metadata."""
        value = meta.get(TOOL_META_KEY) if isinstance(meta, dict) else None
        if not isinstance(value, dict):
            return None
        retention, scope = value.get("retentionSeconds"), value.get("scope")
        if not isinstance(retention, int) or isinstance(retention, bool) or retention < 0:
            return None
        return cls(retention=retention, scope=scope if isinstance(scope, str) else "unknown")
