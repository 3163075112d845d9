"""`canonicalize` and `fingerprint`: RFC 8785 bytes, extended to exact big integers.

The reference is the `rfc8785` package: wherever it accepts a value, our bytes must equal its
bytes. Beyond its domain (integers outside ±(2**53 - 1), lone surrogates) the tests check the
two properties the engine relies on: values equal as parsed JSON give equal bytes, and values
that differ give different bytes (checked through an exact re-parse of the output).
"""

from __future__ import annotations

import json
import math
import random
import re
from fractions import Fraction
from typing import Any

import pytest
import rfc8785
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from idemtools import CanonicalizationError, canonicalize, fingerprint
from idemtools.canonical import _exact, _fast
from tests.budget import examples

pytestmark = pytest.mark.sdk_free

SETTINGS = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
FEWER = settings(
    max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

MAX_SAFE = 2**53 - 1

# --------------------------------------------------------------------------------------------
# strategies
# --------------------------------------------------------------------------------------------

EXTREME_FLOATS = [
    0.0,
    -0.0,
    5e-324,  # smallest subnormal
    -5e-324,
    2.225073858507201e-308,  # largest subnormal
    2.2250738585072014e-308,  # smallest normal
    1.7976931348623157e308,  # largest finite
    -1.7976931348623157e308,
    1e21,  # first float ECMAScript writes with an exponent
    9.999999999999999e20,
    1e-6,  # last plain decimal
    1e-7,  # first small float with an exponent
    1e16,
    1e-5,
    0.1,
    0.2,
    0.30000000000000004,
    123456789.123,
    4.35,
    2.0**53,
    2.0**53 + 2,
    1.5e300,
    333333333.3333333,
    1e23,
    5e-7,
]

floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(EXTREME_FLOATS),
    st.floats(min_value=-1e-300, max_value=1e-300, allow_nan=False, allow_subnormal=True),
    st.integers(-(2**60), 2**60).map(float),  # integral floats of every size up to 2**60
)
safe_ints = st.integers(-MAX_SAFE, MAX_SAFE)
big_ints = st.one_of(
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([2**53, 2**53 + 1, -(2**53) - 1, 10**20, 2**60, 10**400, -(10**400), 2**1024]),
    st.integers(0, 1100).map(lambda e: 2**e),
    st.integers(0, 330).map(lambda e: 10**e),
)

SPECIAL_CHARS = [
    '"',
    "\\",
    "/",
    "\b",
    "\f",
    "\n",
    "\r",
    "\t",
    "\x00",
    "\x1f",
    "\x7f",
    "\u2028",
    "\u2029",
    "\ufeff",
    "\ue000",
    "\uffff",
    "\U00010000",
    "\U0001f600",
    "\U0010ffff",
    "é",
    "e\u0301",
    ".0",
    "e+",
    "e-",
    "null",
    "1.0",
]
chars = st.one_of(
    st.characters(codec="utf-8"),  # every code point except surrogates
    st.characters(max_codepoint=0x1F),  # control characters
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),  # sorts after surrogates in UTF-16
    st.characters(min_codepoint=0x10000),  # astral: sorts before U+E000..U+FFFF in UTF-16
    st.sampled_from(SPECIAL_CHARS),
)
texts = st.lists(chars, max_size=8).map("".join)
keys = st.one_of(
    texts,
    st.sampled_from(["", "a", "b", "\ue000", "\uffff", "\U00010000", "\U0001f600", "A", "é"]),
)


def json_values(
    scalars: st.SearchStrategy[Any], key_strategy: st.SearchStrategy[str] = keys
) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.dictionaries(key_strategy, children, max_size=6),
        ),
        max_leaves=25,
    )


rfc_scalars = st.one_of(st.none(), st.booleans(), safe_ints, floats, texts)
#: Everything `rfc8785.dumps` accepts (no lone surrogates, integers within ±(2**53 - 1)).
rfc_values = json_values(rfc_scalars)
#: Everything the json module can hand us, except lone surrogates (tested separately).
all_scalars = st.one_of(st.none(), st.booleans(), safe_ints, big_ints, floats, texts)
all_values = json_values(all_scalars)

# --------------------------------------------------------------------------------------------
# helpers: exact JSON equality, shuffles, numeric twins
# --------------------------------------------------------------------------------------------


def norm(value: Any) -> Any:
    """A hashable form under which two values are equal iff they are equal as parsed JSON.

    Numbers compare by exact mathematical value (`Fraction` of the int or of the double, so
    `1 == 1.0`, `10**20 == 1e20`, `-0.0 == 0`, but `2**53 + 1 != 2.0**53`); booleans are not
    numbers (Python's `True == 1` must not leak in); strings compare code point by code point;
    object key order does not matter.
    """
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        assert not (isinstance(value, float) and not math.isfinite(value))
        return ("num", Fraction(value))
    if isinstance(value, str):
        return ("str", value)
    if isinstance(value, (list, tuple)):
        return ("arr", tuple(norm(v) for v in value))
    if isinstance(value, dict):
        return ("obj", frozenset((k, norm(v)) for k, v in value.items()))
    raise AssertionError(f"not a JSON value: {value!r}")


_BIG_INT_SPELLING = re.compile(r"-?[0-9]+\.0")


def _parse_float(token: str) -> Any:
    # JCS never writes a trailing ".0"; idemtools uses that spelling for the exact digits of an
    # integer no double represents. Everything else is an ordinary JSON number.
    if _BIG_INT_SPELLING.fullmatch(token):
        return int(token[:-2])
    return float(token)


def _parse_int(token: str) -> Any:
    # Beyond 2**53 an integer token is JCS's spelling of a double (e.g. 2**55 is written
    # 36028797018963970): it stands for that double, not for the digits.
    n = int(token)
    return n if abs(n) <= 2**53 else float(token)


def reparse(data: bytes) -> Any:
    """Parse canonical bytes back, exactly (big integers stay integers)."""
    return json.loads(data.decode("utf-8"), parse_float=_parse_float, parse_int=_parse_int)


def shuffled(value: Any, rnd: random.Random) -> Any:
    """The same value with every object rebuilt in a random key order."""
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {k: shuffled(v, rnd) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def numeric_twin(value: Any, rnd: random.Random) -> Any:
    """The same value with some numbers re-typed: integral floats ↔ ints of equal value."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() and rnd.random() < 0.7 else value
    if isinstance(value, int):
        try:
            f = float(value)
        except OverflowError:
            return value
        return f if int(f) == value and rnd.random() < 0.7 else value
    if isinstance(value, dict):
        return {k: numeric_twin(v, rnd) for k, v in value.items()}
    return [numeric_twin(v, rnd) for v in value]


def _escape_char(ch: str, choice: int) -> str:
    """One of the JSON spellings of a character (`choice` picks among the legal ones)."""
    cp = ord(ch)
    spellings: list[str] = []
    if cp >= 0x20 and ch not in '"\\':
        spellings.append(ch)
    short = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    short |= {"\r": "\\r", "\t": "\\t"}
    if ch in short:
        spellings.append(short[ch])
    if cp < 0x10000:
        spellings.append(f"\\u{cp:04x}")
        spellings.append(f"\\u{cp:04X}")
    else:
        hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
        spellings.append(f"\\u{hi:04x}\\u{lo:04x}")
        spellings.append(f"\\u{hi:04X}\\u{lo:04x}")
    return spellings[choice % len(spellings)]


def spell(value: Any, rnd: random.Random) -> str:
    """JSON text for a value with random escape spellings, whitespace and number spellings."""

    def ws() -> str:
        return rnd.choice(["", "", " ", "\n", "\t ", "\r\n  "])

    if isinstance(value, str):
        return '"' + "".join(_escape_char(c, rnd.randrange(8)) for c in value) + '"'
    if isinstance(value, dict):
        inner = ",".join(
            f"{ws()}{spell(k, rnd)}{ws()}:{ws()}{spell(v, rnd)}{ws()}" for k, v in value.items()
        )
        return "{" + inner + ws() + "}"
    if isinstance(value, list):
        return "[" + ",".join(ws() + spell(v, rnd) + ws() for v in value) + ws() + "]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return rnd.choice(
            [
                repr(value),
                f"{int(value)}",
                f"{int(value)}e0",
                f"{int(value) * 10}E-1",
                f"{int(value)}.000",
            ]
        )
    return json.dumps(value)


# --------------------------------------------------------------------------------------------
# 1. the reference: rfc8785
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(rfc_values)
def test_equals_rfc8785_on_everything_it_accepts(value: Any) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)


@SETTINGS
@given(st.one_of(floats, safe_ints, texts))
def test_scalars_equal_rfc8785(value: Any) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)
    assert canonicalize([value]) == rfc8785.dumps([value])
    assert canonicalize({"k": value}) == rfc8785.dumps({"k": value})


@pytest.mark.parametrize("value", EXTREME_FLOATS + [-x for x in EXTREME_FLOATS])
def test_extreme_floats_equal_rfc8785(value: float) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)


@SETTINGS
@given(st.dictionaries(keys, safe_ints, min_size=2, max_size=12))
def test_key_order_is_utf16_not_code_point(value: dict[str, int]) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)


def test_utf16_key_order_example() -> None:
    # Code-point order puts U+10000 after U+E000; UTF-16 (D800 DC00) puts it before. JCS wants
    # UTF-16 order.
    value = {"\ue000": 1, "\U00010000": 2, "a": 3}
    assert canonicalize(value) == '{"a":3,"\U00010000":2,"\ue000":1}'.encode()
    assert canonicalize(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [
        {"a\u0000": 1, "a": 2},
        ['\u0000\u001f\u007f"\\/\b\f\n\r\t'],
        {'k"ey': 1.0, "k\\ey": 1e-7},
        ["1.0", "e+5", 1.0, 1e21],  # float-looking text inside strings must stay untouched
        {"x.0": "y.0", "1e+16": 1e16},
        [None, 1.0, "null"],
        ['a\\"', 1.0],
    ],
)
def test_tricky_examples_equal_rfc8785(value: Any) -> None:
    assert canonicalize(value) == rfc8785.dumps(value)


# --------------------------------------------------------------------------------------------
# 2. equal as parsed JSON → equal bytes
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(all_values, st.randoms(use_true_random=False))
def test_key_order_never_matters(value: Any, rnd: random.Random) -> None:
    assert canonicalize(shuffled(value, rnd)) == canonicalize(value)


@SETTINGS
@given(all_values, st.randoms(use_true_random=False))
def test_int_and_integral_float_are_the_same_number(value: Any, rnd: random.Random) -> None:
    twin = numeric_twin(value, rnd)
    assert norm(twin) == norm(value)  # the helper itself must keep the value
    assert canonicalize(twin) == canonicalize(value)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, 1.0),
        (0, -0.0),
        (0, 0.0),
        (-1, -1.0),
        (10**20, 1e20),
        (2**60, 2.0**60),
        (2**53, 2.0**53),
        (-(2**53), -(2.0**53)),
        (2**1023, 2.0**1023),
        (10**22, 1e22),
        (int(1.7976931348623157e308), 1.7976931348623157e308),
        ({"a": 1, "b": [2, 3.0]}, {"b": [2.0, 3], "a": 1.0}),
    ],
)
def test_equal_numbers_equal_bytes(a: Any, b: Any) -> None:
    assert canonicalize(a) == canonicalize(b)
    assert canonicalize({"n": a}) == canonicalize({"n": b})


@pytest.mark.parametrize("spelling", ["1", "1.0", "1e0", "1E0", "10e-1", "0.1e1", "1.00000"])
def test_number_spellings_after_parsing(spelling: str) -> None:
    assert canonicalize(json.loads(spelling)) == b"1"


@pytest.mark.parametrize(
    "spellings",
    [
        ['"\\u00e9"', '"é"', '"\\u00E9"'],
        ['"\\/"', '"/"', '"\\u002f"'],
        ['"\\ud83d\\ude00"', '"\U0001f600"', '"\\uD83D\\uDE00"'],
        ['"\\n"', '"\\u000a"', '"\\u000A"'],
        ['"\\""', '"\\u0022"'],
        ['{"\\u0061":1}', '{"a":1}', '{ "a" : 1.0 }'],
    ],
)
def test_escape_spellings_after_parsing(spellings: list[str]) -> None:
    outputs = {canonicalize(json.loads(s)) for s in spellings}
    assert len(outputs) == 1


@SETTINGS
@given(all_values, st.randoms(use_true_random=False))
def test_any_json_spelling_of_a_value_gives_its_bytes(value: Any, rnd: random.Random) -> None:
    text = spell(value, rnd)
    parsed = json.loads(text)
    assert norm(parsed) == norm(value)
    assert canonicalize(parsed) == canonicalize(value)


@SETTINGS
@given(all_values)
def test_json_module_spellings_agree(value: Any) -> None:
    expected = canonicalize(value)
    for text in (
        json.dumps(value),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, indent=3, sort_keys=True),
    ):
        assert canonicalize(json.loads(text)) == expected


# --------------------------------------------------------------------------------------------
# 3. different values → different bytes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (2**53 + 1, 2**53),
        (2**53 + 1, 2.0**53),
        (-(2**53) - 1, -(2**53)),
        (10**20 + 1, 10**20),
        (10**20 + 1, 1e20),
        (0.1, 0.2),
        (0.1, 0.30000000000000004 - 0.2),
        ("é", "e\u0301"),  # composed vs decomposed: no Unicode normalisation
        ("\u00c5", "\u212b"),  # Å: letter vs Angstrom sign, canonically equivalent
        (1, True),
        (0, False),
        (None, 0),
        (None, "null"),
        ("1", 1),
        ([], {}),
        ([1, 2], [2, 1]),
        ({"a": 1}, {"A": 1}),
        ("\ud800", "\\ud800"),
        ("\ud800", "\udc00"),
        (5e-324, 0.0),
        (10**400, 10**400 + 1),
    ],
)
def test_different_values_different_bytes(a: Any, b: Any) -> None:
    assert canonicalize(a) != canonicalize(b)
    assert canonicalize({"v": a}) != canonicalize({"v": b})


@SETTINGS
@given(all_values)
def test_output_parses_back_to_an_equal_value(value: Any) -> None:
    """Injectivity: the bytes determine the value, so different values can never collide.

    If canonicalize(a) == canonicalize(b), re-parsing those bytes yields a value equal to both
    a and b, so a == b. Checked with an exact parser (integers stay exact).
    """
    assert norm(reparse(canonicalize(value))) == norm(value)


# A small universe, so that hypothesis draws equal and unequal pairs alike.
SMALL_SCALARS = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -0.0,
        0.0,
        1,
        1.0,
        -1,
        2**53,
        2.0**53,
        2**53 + 1,
        10**20,
        1e20,
        10**20 + 1,
        0.1,
        0.2,
        "",
        "a",
        "é",
        "e\u0301",
        "1",
        "null",
        "\ud800",
        "\U00010000",
    ]
)
small_values = st.recursive(
    SMALL_SCALARS,
    lambda ch: st.one_of(
        st.lists(ch, max_size=2),
        st.dictionaries(st.sampled_from(["a", "b", "\ue000", "\U00010000"]), ch, max_size=2),
    ),
    max_leaves=4,
)


@settings(max_examples=examples(500), deadline=None)
@given(small_values, small_values)
def test_bytes_equal_iff_values_equal(a: Any, b: Any) -> None:
    assert (canonicalize(a) == canonicalize(b)) == (norm(a) == norm(b))


# --------------------------------------------------------------------------------------------
# 4. the integer extension beyond rfc8785's domain
# --------------------------------------------------------------------------------------------


@SETTINGS
@given(big_ints)
def test_big_integers(n: int) -> None:
    out = canonicalize(n)
    try:
        f = float(n)
    except OverflowError:
        f = math.inf
    if math.isfinite(f) and int(f) == n:
        # A double holds it exactly: written as JCS writes that double.
        assert out == rfc8785.dumps(f)
    else:
        assert out == f"{n}.0".encode()
    assert norm(reparse(out)) == norm(n)


# --------------------------------------------------------------------------------------------
# 5. anything json.loads produces is accepted; NaN / infinity refused
# --------------------------------------------------------------------------------------------

_number_text = st.from_regex(
    r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,25})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
_string_piece = st.one_of(
    chars.map(lambda s: "".join(_escape_char(c, 0) for c in s)),
    chars.map(lambda s: "".join(_escape_char(c, 3) for c in s)),
    st.integers(0xD800, 0xDFFF).map(lambda cp: f"\\u{cp:04x}"),  # lone surrogate escapes
    st.sampled_from(["\\ud800\\udc00", "\\udc00\\ud800", "\\ud800x", "\\udbff\\udfff"]),
)
_string_text = st.lists(_string_piece, max_size=6).map(lambda parts: '"' + "".join(parts) + '"')
json_texts = st.recursive(
    st.one_of(st.sampled_from(["null", "true", "false"]), _number_text, _string_text),
    lambda ch: st.one_of(
        st.lists(ch, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(_string_text, ch), max_size=4).map(
            lambda kvs: "{" + ",".join(f"{k}:{v}" for k, v in kvs) + "}"  # duplicates allowed
        ),
    ),
    max_leaves=20,
)


def _has_infinity(value: Any) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if isinstance(value, dict):
        return any(_has_infinity(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_infinity(v) for v in value)
    return False


@SETTINGS
@given(json_texts)
@example('"\\ud800"')
@example('{"\\udfff": ["\\ud800", 123456789012345678901234567890]}')
@example("[1e400]")
def test_anything_json_loads_returns_is_accepted(text: str) -> None:
    value = json.loads(text)
    if _has_infinity(value):
        # `1e400` is valid JSON text that Python parses to inf: refused clearly, not crashed.
        with pytest.raises(CanonicalizationError):
            canonicalize(value)
        return
    out = canonicalize(value)
    assert isinstance(out, bytes)
    out.decode("utf-8")  # always valid UTF-8: lone surrogates are escaped
    assert norm(reparse(out)) == norm(value)
    assert fingerprint("tool", {"v": value}) == fingerprint("tool", {"v": reparse(out)})


@pytest.mark.parametrize("text", ['"\\ud800"', '"\\udfff"', '"a\\udc00b"', '{"\\ud800": 1}'])
def test_lone_surrogates_are_escaped(text: str) -> None:
    out = canonicalize(json.loads(text))
    assert b"\\ud" in out
    assert json.loads(out) == json.loads(text)


@pytest.mark.parametrize(
    "bad",
    [
        math.nan,
        math.inf,
        -math.inf,
        [1, math.nan],
        {"a": {"b": [math.inf]}},
        {"a": -math.inf},
        json.loads("NaN"),
        json.loads("[Infinity]"),
    ],
)
def test_nan_and_infinity_refused(bad: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(bad)
    with pytest.raises(CanonicalizationError):
        fingerprint("tool", {"x": bad})


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"bytes", {"a": object()}, {(1, 2): 3}])
def test_non_json_types_refused(bad: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonicalize(bad)


def test_circular_reference_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CanonicalizationError):
        canonicalize(loop)


def test_canonicalization_error_is_a_value_error() -> None:
    assert issubclass(CanonicalizationError, ValueError)


def test_tuples_are_arrays() -> None:
    assert canonicalize((1, "a", (2.0,))) == canonicalize([1, "a", [2]])


def test_non_string_keys_canonicalize_the_json_text_json_dumps_writes() -> None:
    value = {10: "a", 9: "b", 2.5: "c"}
    assert canonicalize(value) == canonicalize(json.loads(json.dumps(value)))


# --------------------------------------------------------------------------------------------
# 6. the two internal paths agree
# --------------------------------------------------------------------------------------------

fast_friendly = json_values(
    st.one_of(st.booleans(), safe_ints, floats, st.text(st.characters(max_codepoint=0xFFFF))),
    st.text(st.characters(max_codepoint=0xFFFF), max_size=4),
)


@SETTINGS
@given(st.one_of(fast_friendly, all_values))
def test_fast_and_exact_paths_agree(value: Any) -> None:
    fast = _fast(value)
    exact = _exact(value)
    if fast is not None:
        assert fast == exact
    assert canonicalize(value) == exact


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1.0, "b": [1e-7, 1e21, 1e16, -0.0, 5e-324]},
        [1.5, 2.0, "x.0", "e+1"],
        {"k": "value", "n": 123},
    ],
)
def test_fast_path_is_taken_for_ordinary_payloads(value: Any) -> None:
    # Otherwise the agreement test above would compare the exact path with itself.
    fast = _fast(value)
    assert fast is not None
    assert fast == _exact(value) == rfc8785.dumps(value)


# --------------------------------------------------------------------------------------------
# 7. fingerprint
# --------------------------------------------------------------------------------------------


def test_fingerprint_none_and_empty_arguments_are_the_same_request() -> None:
    assert fingerprint("t", None) == fingerprint("t", {})


def test_fingerprint_is_sha256_of_the_canonical_request() -> None:
    import hashlib

    expected = hashlib.sha256(b'{"arguments":{"a":1},"name":"t"}').hexdigest()
    assert fingerprint("t", {"a": 1.0}) == expected


@SETTINGS
@given(st.dictionaries(keys, all_scalars, max_size=4), texts, texts)
def test_fingerprint_differs_by_name(arguments: dict[str, Any], a: str, b: str) -> None:
    assume(a != b)
    assert fingerprint(a, arguments) != fingerprint(b, arguments)


@FEWER
@given(
    st.dictionaries(keys, all_values, max_size=4),
    st.one_of(st.dictionaries(keys, all_values, max_size=4), st.just({})),
)
def test_fingerprint_equal_iff_arguments_equal(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert (fingerprint("t", a) == fingerprint("t", b)) == (norm(a) == norm(b))


@FEWER
@given(st.dictionaries(keys, all_values, max_size=4), st.randoms(use_true_random=False))
def test_fingerprint_ignores_key_order_and_number_types(
    arguments: dict[str, Any], rnd: random.Random
) -> None:
    twin = numeric_twin(shuffled(arguments, rnd), rnd)
    assert fingerprint("t", twin) == fingerprint("t", arguments)
