"""Request bodies sent with `Content-Encoding`: inflated before the keyed-call check, bounded.

An upstream that inflates bodies itself (Express's `express.json()` does by default) would run
a compressed keyed call the proxy could not read, on every retry. So the proxy reads what the
upstream would read: `gzip` and `deflate` (zlib-wrapped, or raw as some clients send it),
stacked in any order, are inflated, incrementally and never past the same byte cap as a plain
body (a small zip bomb cannot make it allocate more); `identity` is nothing. Any other coding
(`br`, `zstd`, `compress`, a misspelling) is refused: the proxy does not relay what it could not
check. The inflated body is then relayed without `Content-Encoding`, so the upstream runs
exactly the bytes the engine decided on.
"""

from __future__ import annotations

import zlib

__all__ = ["Corrupt", "TooLarge", "Unsupported", "inflate"]


class Unsupported(ValueError):
    """A coding the proxy does not inflate (answered HTTP 415)."""


class TooLarge(ValueError):
    """The inflated body is over the cap (answered HTTP 413)."""


class Corrupt(ValueError):
    """The body is not valid data of its coding (answered as unparseable: -32700)."""


def _codings(header: str) -> list[str]:
    codings = [c.strip().lower() for c in header.split(",")]
    return [c for c in codings if c and c != "identity"]


def _inflate_one(data: bytes, wbits: int, cap: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    out = bytearray()
    pending = data
    try:
        while pending:
            # Never more than the room left (plus one byte, to see the cap crossed).
            out += inflater.decompress(pending, cap - len(out) + 1)
            if len(out) > cap:
                raise TooLarge(f"the inflated body is over {cap} bytes")
            pending = inflater.unconsumed_tail
            if not pending and not inflater.eof:
                break
        while not inflater.eof and len(out) <= cap:
            more = inflater.decompress(b"", cap - len(out) + 1)
            if not more:
                break
            out += more
    except zlib.error as exc:
        raise Corrupt(f"the body is not valid compressed data ({exc})") from None
    if len(out) > cap:
        raise TooLarge(f"the inflated body is over {cap} bytes")
    if not inflater.eof or inflater.unused_data:
        raise Corrupt("the compressed body is truncated or has trailing data")
    return bytes(out)


def _inflate_deflate(data: bytes, cap: int) -> bytes:
    try:
        return _inflate_one(data, zlib.MAX_WBITS, cap)
    except Corrupt:
        return _inflate_one(data, -zlib.MAX_WBITS, cap)  # raw deflate, as some clients send


def inflate(body: bytes, header: str | None, cap: int) -> bytes:
    """`body` with every coding of the `Content-Encoding` value `header` undone (last applied,
    first undone), never more than `cap` bytes at any stage."""
    if header is None:
        return body
    codings = _codings(header)
    for coding in codings:
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise Unsupported(f"Content-Encoding {coding!r} is not accepted (gzip, deflate)")
    for coding in reversed(codings):
        if coding == "deflate":
            body = _inflate_deflate(body, cap)
        else:
            body = _inflate_one(body, 16 + zlib.MAX_WBITS, cap)
    return body
