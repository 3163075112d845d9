"""What the client helper and `KeyedSession` share: keys, the capability, per-tool metadata.

A module of its own so that `idemtools.client` can offer `KeyedSession` (which builds on these)
without the two importing each other. The SDK line's client half (`adapters/client_mcp1.py`,
`client_mcp2.py`) is chosen here once; no server adapter, engine or store is loaded, and no
class or model a server uses is changed.
"""

from __future__ import annotations

import hashlib
import uuid
import warnings
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .._sdk import SDK2
from ..errors import IdempotencyNotSupportedError
from ..policy import TOOL_META_KEY

__all__ = [
    "Advertised",
    "ToolIdempotency",
    "advertises",
    "advertises_idempotency",
    "key_digest",
    "new_key",
    "not_supported",
    "sdk",
]

if SDK2:
    from . import sdk_mcp2 as sdk
else:
    from . import sdk_mcp1 as sdk
sdk.observe_capabilities()  # read when the session connects: a ClientSession-only patch on 2.x


def new_key() -> str:
    """A fresh key: UUID4, enough entropy that unrelated calls never collide (SEP, Security)."""
    return str(uuid.uuid4())


def key_digest(key: str) -> str:
    """The key's hash prefix, as the server logs it (`engine.decision.key_digest`): never the
    key itself. Written here too so that a client loads no engine for it."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def advertises(session: Any) -> bool:
    """The capability, read synchronously (for idemtools' own callers)."""
    return sdk.advertises(getattr(session, "session", session) if SDK2 else session)


def not_supported(name: str, session: Any) -> IdempotencyNotSupportedError:
    """The refusal of a keyed call to a session without the capability, saying exactly why."""
    target = getattr(session, "session", session) if SDK2 else session
    if sdk.connected_unobserved(target):
        return IdempotencyNotSupportedError(
            f"refused to call tool {name!r} with an idempotency key: this session connected "
            "before idemtools.client was imported, and the mcp SDK dropped "
            "capabilities.tools.idempotency from the server's initialize answer (its "
            "ToolsCapability has no such field; idemtools keeps it only for sessions that "
            "connect after the import). Whether the server advertises it cannot be known from "
            "this session: import idemtools.client before connecting (at the top of the "
            "module), or connect a new session",
            tool=name,
        )
    return IdempotencyNotSupportedError(
        f"refused to call tool {name!r} with an idempotency key: the server does not advertise "
        "capabilities.tools.idempotency, so it ignores the key and a retry may run the tool "
        "twice. Install idemtools on the server (idemtools.install(server)), or pass "
        "require_capability=False to call it anyway without that guarantee",
        tool=name,
    )


class Advertised:
    """`advertises_idempotency`'s answer: `await` it for the bool.

    Testing it for truth directly (`if advertises_idempotency(s):`, without `await`) also
    gives the right answer, with a `DeprecationWarning`: a plain coroutine there would always be
    true, and a client would trust a server that ignores its keys.
    """

    __slots__ = ("_value",)

    def __init__(self, value: bool) -> None:
        self._value = value

    def __await__(self) -> Generator[Any, None, bool]:
        yield from ()  # a generator that never suspends: `await` gets the value at once
        return self._value

    def __bool__(self) -> bool:
        warnings.warn(
            "advertises_idempotency() is async: use `await advertises_idempotency(session)` "
            "(testing its answer for truth directly is deprecated)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._value

    def __repr__(self) -> str:
        return f"<advertises_idempotency: {self._value} (await it)>"


def advertises_idempotency(session: Any) -> Advertised:
    """Whether the server declared `capabilities.tools.idempotency`: `await` it.

    Without it, a key is harmless but guarantees nothing: the server may run a retry twice.
    Async like its sibling `tool_idempotency` (which may list the tools): every question a
    client asks about the server is awaited. The answer comes from what the server declared
    when the session connected (import `idemtools.client` before connecting).
    """
    return Advertised(advertises(session))


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
