"""What both adapters read off an SDK's validated access token (both lines share this).

Kept free of SDK imports: `AccessToken` has the same shape on every line (mcp 1.30+ and 2.x add
`subject` and `claims`; 1.21-1.29 have neither), so it is read by attribute, defensively.
"""

from __future__ import annotations

from typing import Any

from ...scopes import AuthInfo

__all__ = ["auth_info", "configured_issuer"]


def configured_issuer(server: Any) -> str | None:
    """The `issuer_url` of the server's auth settings (FastMCP / MCPServer), if any."""
    settings = getattr(server, "settings", None)
    issuer = getattr(getattr(settings, "auth", None), "issuer_url", None)
    return str(issuer) if issuer is not None else None


def auth_info(token: Any, default_issuer: str | None) -> AuthInfo:
    """The caller a validated `AccessToken` names.

    The issuer is the token's own `iss` claim, else the server's configured issuer: a subject
    is unique only per issuer, so the same `sub` from two issuers never meets. No client-id
    stand-in for a missing subject: a client id names an application, not a user.
    """
    claims = getattr(token, "claims", None)
    claims = claims if isinstance(claims, dict) else {}
    issuer = claims.get("iss")
    subject = getattr(token, "subject", None) or claims.get("sub")
    client_id = getattr(token, "client_id", None)
    scopes = getattr(token, "scopes", None) or ()
    return AuthInfo(
        issuer=str(issuer) if issuer else default_issuer,
        subject=str(subject) if subject else None,
        client_id=str(client_id) if client_id else None,
        scopes=tuple(str(s) for s in scopes),
        token=token,
    )
