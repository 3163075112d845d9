"""Who the HTTP caller is, as the proxy itself verified it: bearer JWTs, or a credential hash.

The proxy answers replays itself, so the caller's identity must come from a check the proxy
made on *this* request. With `--issuer/--jwks-url/--audience` it verifies the bearer JWT
(signature from the JWKS, `iss`, `aud`, `exp`, `sub` required; the audience is mandatory, so a
token minted for another service never verifies): a keyed call whose token does not verify
(none, expired, another audience) is refused before any record is read, whatever the tool's
scope, so it gets no replay. With `--scope token-hash` the identity is a SHA-256 of the
`Authorization` value: possessing the token is what authorizes a replay (the proxy says so at
start-up).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

import httpx

from ..errors import RefusedError, ScopeUnavailableError, UnauthorizedError
from ..scopes import AuthInfo, CallContext
from .scope import RequestInfo, credential_hash

__all__ = ["JwtVerifier", "caller_refusal", "http_context"]

_NEEDS_JWT = frozenset({"subject", "client"})

log = logging.getLogger("idemtools.proxy")

_KEYS_LIFETIME = 300.0  # seconds a fetched JWKS is trusted: key rotation is seen within it
_REFETCH_AFTER = 5.0  # an unknown kid re-reads the JWKS at most this often
_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]


class JwtVerifier:
    """Verifies bearer JWTs against an issuer's JWKS (PyJWT, the `proxy` extra).

    Keys are cached (five minutes; an unknown `kid` re-reads them) and fetched off the event
    loop; `jwks_url` may be
    `https://...` or, for tests and air-gapped hosts, `file:///path/jwks.json`.
    """

    def __init__(self, issuer: str, jwks_url: str, audience: str) -> None:
        import jwt  # the `proxy` extra

        self._jwt = jwt
        self.issuer = issuer
        self.audience = audience
        self.jwks_url = jwks_url
        self._keys: dict[str, Any] = {}
        self._fetched = 0.0
        self._lock = threading.Lock()

    def _fetch(self) -> None:
        """(Re)read the JWKS: at most every few seconds, so unknown `kid`s cannot flood it."""
        now = time.monotonic()
        if self._keys and now - self._fetched < _REFETCH_AFTER:
            return
        parts = urlsplit(self.jwks_url)
        if parts.scheme == "file":
            data = Path(url2pathname(parts.path)).read_text(encoding="utf-8")
        else:
            answer = httpx.get(self.jwks_url, timeout=10, follow_redirects=False)
            answer.raise_for_status()
            data = answer.text
        keys = self._jwt.PyJWKSet.from_json(data).keys
        self._keys = {str(k.key_id): k for k in keys}
        self._fetched = now

    def _key(self, kid: str) -> Any:
        with self._lock:
            if kid not in self._keys or time.monotonic() - self._fetched > _KEYS_LIFETIME:
                self._fetch()
            return self._keys[kid].key

    def _verify(self, token: str) -> dict[str, Any] | None:
        jwt = self._jwt
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            claims: dict[str, Any] = jwt.decode(
                token,
                self._key(str(kid)),
                algorithms=_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "sub", "aud"], "verify_aud": True},
            )
        except (jwt.PyJWTError, OSError, ValueError, KeyError, httpx.HTTPError) as exc:
            log.info("bearer token refused: %s", type(exc).__name__)
            return None
        return claims

    async def verify(self, token: str) -> dict[str, Any] | None:
        """The token's claims when it verifies now, else None."""
        return await asyncio.to_thread(self._verify, token)


def _auth_info(claims: Mapping[str, Any]) -> AuthInfo:
    scopes = claims.get("scope", claims.get("scp", ""))
    if isinstance(scopes, str):
        scopes = scopes.split()
    return AuthInfo(
        issuer=str(claims["iss"]),
        subject=str(claims["sub"]),
        client_id=str(claims.get("client_id") or claims.get("azp") or "") or None,
        scopes=tuple(str(s) for s in scopes) if isinstance(scopes, list) else (),
        token=dict(claims),
    )


async def http_context(
    headers: Mapping[str, str], verifier: JwtVerifier | None, tool: Any, arguments: Any
) -> CallContext:
    """The `CallContext` of one HTTP request: identity only from what the proxy verified."""
    authorization = headers.get("authorization", "")
    claims: dict[str, Any] | None = None
    if verifier is not None and authorization[:7].lower() == "bearer ":
        claims = await verifier.verify(authorization[7:].strip())
    info = RequestInfo(
        credential_hash=credential_hash(authorization) if authorization else None,
        claims=claims or {},
        authorization=authorization,
        session=headers.get("mcp-session-id", ""),
    )
    return CallContext(
        transport="http",
        auth=_auth_info(claims) if claims else None,
        tool=tool if isinstance(tool, str) else None,
        arguments=arguments if isinstance(arguments, dict) else None,
        raw=info,
    )


def caller_refusal(
    verifier: JwtVerifier | None, context: CallContext, scope: str, key: object
) -> RefusedError | None:
    """Why a keyed HTTP call is refused before the engine reads any record, or None.

    With a verifier, every keyed call needs a token that verifies now, whatever the tool's
    scope: a token-hash or shared replay must not be served to a token minted for another
    service. Without one, a scope that needs a verified subject names the proxy's flags.
    """
    if verifier is not None:
        if context.auth is None:
            return UnauthorizedError(
                "keyed calls need a bearer token this proxy verifies (its --issuer and "
                "--audience, not expired); this request has none that does",
                key=key,
            )
        return None
    if scope in _NEEDS_JWT:
        return ScopeUnavailableError(
            f"this tool is scoped by the caller's verified identity (--scope {scope}): start "
            "the proxy with --issuer/--jwks-url/--audience to verify bearer tokens, or scope "
            "it by --scope token-hash",
            key=key,
        )
    return None
