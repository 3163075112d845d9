"""Canonical JSON (RFC 8785 / JCS) and the request fingerprint built on it.

Two `tools/call` requests are "the same request" when their tool names are equal and their
arguments are equal *as parsed JSON values*. We decide that by comparing canonical bytes:
RFC 8785 output, extended so that integers beyond the IEEE-754 safe range stay exact.

Why not just call `rfc8785.dumps`? It is the reference (our tests compare against it on every
input it accepts), but it is a pure-Python walk, several times too slow for large arguments, and it
refuses integers beyond 2**53. No library writes JCS fast, so we compose two that write *almost*
JCS and fix the difference by hand:

* Fast path: `orjson` walks and sorts in native code. Its strings and key order are JCS's; only
  some floats are spelled differently (`1.0`, `1e-6`, `1e+16`). Those tokens are found with
  literal-prefix searches (`.0`, `e+`, `e-`), checked to be outside strings, and re-spelled.
* Exact path: the standard `json` encoder plus one linear regular-expression scan, used whenever
  orjson's output could be ambiguous or wrong for JCS: `null` present (orjson writes NaN as
  `null`), integers beyond 2**53, lone surrogates, characters beyond U+FFFF (JCS sorts keys by
  UTF-16, orjson and `json` by code point), escaped quotes (which defeat the cheap string check),
  or any type orjson hands back to us.

The integer extension: an integer that a double represents exactly is written as JCS writes that
double, so `10**20 == 1e20` and `2**60 == 2.0**60`. An integer no double represents exactly
(`2**53 + 1`) has no JCS spelling; we write its exact digits followed by `.0`, a spelling that JCS
never produces, so it can never collide with the canonical form of a different number.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["CanonicalizationError", "canonicalize", "fingerprint"]


class CanonicalizationError(ValueError):
    """The value is not a JSON value (NaN, infinity, a non-string key, an unsupported type)."""


# The C encoder does the walk; these settings make its string output match JCS exactly.
_encode = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=True,
    separators=(",", ":"),
).encode
_encode_unsorted = json.JSONEncoder(
    ensure_ascii=False,
    allow_nan=False,
    sort_keys=False,
    separators=(",", ":"),
).encode

# One pass over the encoder's output. Each match is a run of text that is already canonical
# (strings, structure, safe integers, plain decimals), followed by at most one number that needs
# rewriting. The alternatives start with distinct characters and nothing after the loop can
# fail, so the engine never backtracks and the scan is linear.
_SCAN = re.compile(
    r"""
    (?:
        "[^"\\]*(?:\\.[^"\\]*)*"          # a string
      | [^"\d\-]+                         # structure and literals
      | -?\d{1,15}(?![\d.e])              # integers well inside the safe range
      | -?\d+\.\d*[1-9](?![\de])          # plain decimals: repr and ECMAScript agree
    )*
    (-?\d+(?:\.\d+)?(?:e[-+]?\d+)?)?
    """,
    re.VERBOSE,
)

_NON_BMP = re.compile("[\U00010000-\U0010ffff]")
_NON_BMP_UTF8 = re.compile(b"[\xf0-\xf4]")  # lead bytes of 4-byte UTF-8 sequences
_FLOAT_TOKEN = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?")
_INTEGRAL = re.compile(rb"\.0(?![0-9])")
_EXPONENT = re.compile(rb"e[-+]")
# Types orjson would serialize but `json.dumps` refuses or spells differently are handed back
# (TypeError) so that both paths accept exactly the same values.
_ORJSON_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
)
_MAX_SAFE = 2**53


def _ecmascript(x: float) -> str:
    """Format a finite float as ECMAScript Number::toString does (RFC 8785 section 3.2.2.3).

    `repr` already yields the shortest round-trip digits; only their layout differs.
    """
    if x == 0:
        return "0"  # also -0.0
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")
    whole, _, frac = mantissa.partition(".")
    all_digits = whole + frac
    stripped = all_digits.lstrip("0")
    # value = 0.<digits> * 10**n
    n = len(whole) + (int(exp) if exp else 0) - (len(all_digits) - len(stripped))
    digits = stripped.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        e_str = ("+" if e >= 0 else "-") + str(abs(e))
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + e_str
    return sign + out


def _number(token: str) -> str:
    if "." in token or "e" in token:
        return _ecmascript(float(token))
    n = int(token)
    if -_MAX_SAFE <= n <= _MAX_SAFE:
        return token
    try:
        f = float(n)
    except OverflowError:
        return token + ".0"
    return _ecmascript(f) if int(f) == n else token + ".0"


def _rewrite(m: re.Match[str]) -> str:
    number = m.group(1)
    if number is None:
        return m.group()
    return m.string[m.start() : m.start(1)] + _number(number)


def _json_key(key: Any) -> str:
    """Spell a dict key the way `json.dumps` does, so both encoding paths agree."""
    if isinstance(key, str):
        return key
    if key is True or key is False or key is None:
        return json.dumps(key)
    if isinstance(key, (int, float)):
        return _encode(key)
    raise CanonicalizationError(f"keys must be str, int, float, bool or None, not {type(key)}")


def _utf16_sorted(value: Any) -> Any:
    """Rebuild dicts in RFC 8785 key order (UTF-16 code units); only needed for non-BMP keys."""
    if isinstance(value, dict):
        items = sorted(
            ((_json_key(k), v) for k, v in value.items()),
            key=lambda kv: kv[0].encode("utf-16-be", "surrogatepass"),
        )
        return {k: _utf16_sorted(v) for k, v in items}
    if isinstance(value, (list, tuple)):
        return [_utf16_sorted(v) for v in value]
    return value


def _orjson(value: Any) -> bytes | None:
    """orjson's encoding, or None when it refuses the value (then keys may be non-strings)."""
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        return None


def _fast(value: Any) -> bytes | None:
    """orjson's output with its float spellings fixed, or None when the exact path must decide."""
    out = _orjson(value)
    return None if out is None else _respell(out)


def _respell(out: bytes) -> bytes | None:
    """Fix orjson's float spellings to JCS's; None when the output could be ambiguous."""
    # The substring tests on a latin-1 view (one character per byte, so a test of ASCII text
    # is exact): `in` on str costs a fraction of `in` on bytes, and every keyed call has a
    # fingerprint.
    text = out.decode("latin-1")
    if "null" in text or '\\"' in text or (not out.isascii() and _NON_BMP_UTF8.search(out)):
        return None
    if ".0" not in text and "e+" not in text and "e-" not in text:
        return out  # nothing either scan below could match (the usual case): skip building them
    spots = sorted(
        [m.start() for m in _INTEGRAL.finditer(out)] + [m.start() for m in _EXPONENT.finditer(out)]
    )
    if not spots:
        return out
    parts: list[bytes] = []
    done = 0  # bytes of `out` already copied to parts
    quotes = 0  # quote characters before `counted`; odd means inside a string
    counted = 0
    cache: dict[bytes, bytes] = {}
    for spot in spots:
        if spot < done:
            continue  # the `.0` of a token already rewritten (e.g. `1.0e+21` is not orjson's)
        quotes += out.count(b'"', counted, spot)
        counted = spot
        if quotes % 2:
            continue  # inside a string
        # A number token is at most ~25 bytes long: look back a bounded window only.
        lo = max(0, spot - 40)
        start = (
            max(
                out.rfind(b"[", lo, spot),
                out.rfind(b"{", lo, spot),
                out.rfind(b",", lo, spot),
                out.rfind(b":", lo, spot),
            )
            + 1
        )
        m = _FLOAT_TOKEN.match(out, start)
        if m is None:  # pragma: no cover - orjson only writes numbers here
            return None
        token = m.group()
        fixed = cache.get(token)
        if fixed is None:
            fixed = cache[token] = _ecmascript(float(token)).encode()
        parts.append(out[done:start])
        parts.append(fixed)
        done = m.end()
    parts.append(out[done:])
    return b"".join(parts)


def _exact(value: Any, *, string_keys: bool = True) -> bytes:
    """The standard `json` encoder and a linear scan: slower, and right for every input.

    `json` sorts keys before spelling them, so non-string keys (`{10: .., 9: ..}`) would come
    out in the wrong order; unless orjson vouched that every key is a string, keys are spelled
    and sorted by UTF-16 in a pre-walk first.
    """
    try:
        if not string_keys:
            text = _encode_unsorted(_utf16_sorted(value))
        else:
            text = _encode(value)
            if not text.isascii() and _NON_BMP.search(text):
                text = _encode_unsorted(_utf16_sorted(value))
    except CanonicalizationError:
        raise
    except (ValueError, TypeError) as exc:  # NaN, infinity, circular, unsupported or mixed keys
        raise CanonicalizationError(f"not a JSON value: {exc}") from None
    except RecursionError:
        raise CanonicalizationError("not a JSON value: circular or too deeply nested") from None
    text = _SCAN.sub(_rewrite, text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates: "backslashreplace" spells them "\udXXX", a valid JSON escape.
        return text.encode("utf-8", "backslashreplace")


def canonicalize(value: Any) -> bytes:
    """Return the canonical JSON bytes of a parsed JSON value.

    Equal for values that are equal as JSON (key order, `1` vs `1.0`, `10**20` vs `1e20`),
    different for values that differ (`2**53 + 1` vs `2**53`, composed vs decomposed "é": no
    Unicode normalisation). Byte-identical to `rfc8785.dumps` wherever that accepts the input.

    Lone surrogates (which Python's `json` produces from `"\\ud800"`) are written as `\\uXXXX`
    escapes instead of failing, so any value `json.loads` returns can be fingerprinted.

    Accepts exactly what `json.dumps` accepts and canonicalizes the JSON text it would write:
    tuples are arrays, and `int`/`float`/`bool`/`None` dict keys are spelled as `json.dumps`
    spells them (parsed JSON only ever has string keys).

    Raises:
        CanonicalizationError: NaN or infinity, a non-JSON type, keys of mixed types, or a
            circular reference.
    """
    try:  # `_orjson`, inline: every keyed call has a fingerprint
        out = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # big int, lone surrogate, non-string key or other type: exact path
        return _exact(value, string_keys=False)
    fast = _respell(out)
    return fast if fast is not None else _exact(value, string_keys=True)


def fingerprint(name: str, arguments: Mapping[str, Any] | None) -> str:
    """SHA-256 (hex) of the canonical form of `{"name": ..., "arguments": ...}`.

    Absent, `None` and `{}` arguments are the same request, as docs/contract.md fixes.
    """
    return hashlib.sha256(
        canonicalize({"name": name, "arguments": dict(arguments) if arguments else {}})
    ).hexdigest()
