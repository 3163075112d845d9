"""`--confirm-credential`: a `token-hash` replay only for a credential the upstream still accepts.

With `--scope token-hash` the proxy cannot verify an opaque token itself, and it answers a
replay without the upstream, so by default possessing the token authorizes the replay even
after the upstream revoked it. With `--confirm-credential`, every keyed call of a token-hash
tool (the replays are the point; an execution is authorized by the upstream anyway) first
sends the upstream one authenticated request, a JSON-RPC `ping` with the caller's
`Authorization` (and session), and goes on only if the upstream does not refuse it with
HTTP 401 or 403. An accepted credential is remembered for `ttl` seconds (by its hash), so a
revoked token can still replay for at most that long; a refusal, or an upstream that cannot be
reached, is never remembered and refuses the call (`idempotency_unauthorized`: fail closed).
"""

from __future__ import annotations

import inspect
import itertools
import json
import logging
import time
from dataclasses import replace
from typing import Any

import httpx

from ..policy import Policy
from ..scopes import AuthorizeFn, CallContext
from .config import ProxyConfig
from .scope import scope_name

__all__ = ["DEFAULT_TTL", "CredentialConfirmer", "confirming"]

log = logging.getLogger("idemtools.proxy")

DEFAULT_TTL = 30.0
"""Seconds an accepted credential is not asked again: the longest a revoked token replays."""


class CredentialConfirmer:
    """Asks the upstream whether it still accepts a credential; remembers a yes briefly."""

    def __init__(self, url: str, client: httpx.AsyncClient, ttl: float = DEFAULT_TTL) -> None:
        self.url = url
        self.client = client
        self.ttl = ttl
        self.accepted: dict[str, float] = {}
        """credential hash → monotonic time until which it counts as confirmed."""
        self._ids = itertools.count(1)

    async def __call__(self, ctx: CallContext) -> bool:
        info = ctx.raw
        digest = getattr(info, "credential_hash", None)
        authorization = getattr(info, "authorization", "")
        if not isinstance(digest, str) or not authorization:
            return False  # nothing to confirm: the scope refuses such a call anyway
        now = time.monotonic()
        if self.accepted.get(digest, 0.0) > now:
            return True
        if len(self.accepted) > 10_000:  # expired entries, dropped now and then
            self.accepted = {k: t for k, t in self.accepted.items() if t > now}
        headers = {
            "authorization": authorization,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-11-25",
        }
        session = getattr(info, "session", "")
        if session:
            headers["mcp-session-id"] = session
        body = {"jsonrpc": "2.0", "id": f"idemtools-proxy:confirm-{next(self._ids)}"}
        body["method"] = "ping"
        try:
            response = await self.client.post(
                self.url, content=json.dumps(body), headers=headers, timeout=10.0
            )
            await response.aclose()
        except httpx.HTTPError as exc:
            log.warning("credential not confirmed: the upstream did not answer (%s)", exc)
            return False
        if response.status_code in (401, 403):
            return False
        self.accepted[digest] = time.monotonic() + self.ttl
        return True


def _both(first: AuthorizeFn | None, then: CredentialConfirmer) -> AuthorizeFn:
    async def check(ctx: CallContext) -> bool:
        if first is not None:
            verdict: Any = first(ctx)
            if inspect.isawaitable(verdict):
                verdict = await verdict
            if verdict is not True and verdict is not None:
                return False
        return await then(ctx)

    return check


def confirming(config: ProxyConfig, confirmer: CredentialConfirmer) -> ProxyConfig:
    """`config` with the confirmation added to every token-hash policy's `authorize`."""

    def wrap(policy: Policy) -> Policy:
        if scope_name(policy.scope) != "token-hash":
            return policy
        return replace(policy, authorize=_both(policy.authorize, confirmer))

    return replace(
        config,
        default=wrap(config.default),
        rules=tuple(replace(rule, policy=wrap(rule.policy)) for rule in config.rules),
    )
