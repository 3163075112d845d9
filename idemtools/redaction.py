"""Credentials out of the operator's channels: a URL as it may be printed or logged.

Store URLs carry passwords (`redis://app:secret@cache:6379/0`,
`postgresql://app@db/x?password=secret`), and they end up in error messages, logs and
documentation. `redact_url` keeps what an operator needs to tell one store from another (scheme,
user, host, path, the other query options) and replaces every password with `***`.

It never raises and never needs a well-formed URL: a password holding an unencoded `#`, `?`,
`/` or `@` defeats `urllib.parse` (the rest of it would be read as a fragment, a query, a path
or the host), so two readings are taken and everything either calls a credential is hidden:
the user-info up to the *last* `@`, and the value of a `password=` option up to the end of the
URL (a raw `&` in it cannot be told from the next option). More may be hidden, never less.
"""

from __future__ import annotations

import re
from urllib.parse import quote, quote_plus, unquote, unquote_plus

__all__ = ["MASK", "password_needs_encoding", "redact_url", "secrets_in", "withhold"]

MASK = "***"

# Query parameters that carry a credential (libpq's `password`, redis-py's `password`).
_SECRET_PARAMS = frozenset({"password", "pass", "passwd", "pwd", "sslpassword"})


def _spans(url: str) -> list[tuple[int, int]]:
    """Where the credentials are in `url`: (start, end) ranges, merged and in order."""
    base = url.find("://")
    base = base + 3 if base >= 0 else 0
    rest = url[base:]
    spans: list[tuple[int, int]] = []
    at = rest.rfind("@")
    if at >= 0:
        colon = rest.find(":", 0, at)
        if colon >= 0 and colon + 1 < at:
            spans.append((base + colon + 1, base + at))
    first_at = rest.find("@")
    query = rest.find("?", first_at if first_at >= 0 else 0)
    if query >= 0:
        offset = base + query + 1
        for item in url[offset:].split("&"):
            name, eq, _value = item.partition("=")
            if eq and unquote_plus(name).strip().lower() in _SECRET_PARAMS:
                start = offset + len(name) + 1
                if start < len(url):
                    spans.append((start, len(url)))
                break
            offset += len(item) + 1
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact_url(url: str) -> str:
    """`url` with its password (and any `password=` option's value) replaced by `***`."""
    if not isinstance(url, str):
        return MASK
    out, last = [], 0
    for start, end in _spans(url):
        out.append(url[last:start])
        out.append(MASK)
        last = end
    out.append(url[last:])
    return "".join(out)


def secrets_in(url: str) -> set[str]:
    """Every spelling (raw, decoded, re-encoded) of every credential in `url`, to look for."""
    found: set[str] = set()
    if not isinstance(url, str):
        return found
    for start, end in _spans(url):
        secret = url[start:end]
        # A driver's parser may cut a raw credential at any delimiter and quote one piece.
        pieces = [p for p in re.split(r"[&=#?/@:;, ]", secret) if len(p) >= _PIECE]
        for piece in (secret, *pieces):
            found |= _spellings(piece)
    return found


_PIECE = 4  # shorter pieces of a credential say little, and would withhold too much


def _spellings(secret: str) -> set[str]:
    found: set[str] = set()
    for spelling in (
        secret,
        unquote(secret),
        unquote_plus(secret),
        quote(unquote(secret), safe=""),
        quote_plus(unquote(secret)),
    ):
        if spelling:
            found.add(spelling)
    return found


def password_needs_encoding(url: str) -> bool:
    """Whether the URL's user-info password holds a character the parsers misread.

    An unencoded `/`, `?`, `#` or whitespace ends the authority early (the rest of the password
    becomes a path, a query or a fragment, and the drivers' errors quote it); a `%` not followed
    by two hex digits is refused by libpq with the password in its message.
    """
    base = url.find("://")
    rest = url[base + 3 :] if base >= 0 else url
    at = rest.rfind("@")
    colon = rest.find(":", 0, at) if at >= 0 else -1
    if colon < 0:
        return False
    password = rest[colon + 1 : at]
    if any(c in password for c in "/?#") or any(c.isspace() for c in password):
        return True
    i = password.find("%")
    while i >= 0:
        escape = password[i + 1 : i + 3]
        if len(escape) < 2 or not _HEX.issuperset(escape):
            return True
        i = password.find("%", i + 1)
    return False


_HEX = frozenset("0123456789abcdefABCDEF")


def withhold(text: str, url: str) -> str:
    """`text` (an error message about `url`), or a placeholder if it quotes a credential.

    Not a search-and-replace: a one-letter password would mangle every word holding that
    letter, and a password cut short by a bad parse leaves fragments no replacement finds.
    """
    if any(secret in text for secret in secrets_in(url)):
        return "(its text is withheld: it quotes a credential from the URL)"
    return text
