"""Who the HTTP caller is, as the proxy itself verified it: bearer JWTs, or a credential hash.

The proxy answers replays itself, so the caller's identity must come from a check the proxy
made on *this* request. With `--issuer/--jwks-url/--audience` it verifies the bearer JWT
(signature from the JWKS, `iss`, `aud`, `exp`, `sub` required): a token that no longer
verifies (expired, another audience) yields no identity, so its keyed calls are refused and it
gets no replay. With `--scope token-hash` the identity is a SHA-256 of the `Authorization`
value: possessing the token is what authorizes a replay (the proxy says so at start-up).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from ..scopes import AuthInfo, CallContext
from .scope import RequestInfo, credential_hash

__all__ = ["JwtVerifier", "http_context"]

log = logging.getLogger("idemtools.proxy")

_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]


class JwtVerifier:
    """Verifies bearer JWTs against an issuer's JWKS (PyJWT, the `proxy` extra).

    Keys are cached (five minutes) and fetched off the event loop; `jwks_url` may be
    `https://...` or, for tests and air-gapped hosts, `file:///path/jwks.json`.
    """

    def __init__(self, issuer: str, jwks_url: str, audience: str | None) -> None:
        import jwt  # the `proxy` extra

        self._jwt = jwt
        self.issuer = issuer
        self.audience = audience
        self._keys = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300)

    def _verify(self, token: str) -> dict[str, Any] | None:
        jwt = self._jwt
        try:
            key = self._keys.get_signing_key_from_jwt(token).key
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "sub"], "verify_aud": self.audience is not None},
            )
        except (jwt.PyJWTError, OSError, ValueError) as exc:
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
    )
    return CallContext(
        transport="http",
        auth=_auth_info(claims) if claims else None,
        tool=tool if isinstance(tool, str) else None,
        arguments=arguments if isinstance(arguments, dict) else None,
        raw=info,
    )
