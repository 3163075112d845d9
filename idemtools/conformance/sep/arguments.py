"""Equivalent arguments match; what is not part of them (`_meta`) does not count.

The same logical arguments written as different JSON texts (key order, whitespace, escapes,
numbers) are one operation; strings that differ only in Unicode normalization form are not.
"""

from __future__ import annotations

import unicodedata

from ..contract import RECORD
from ..scenario import Context, Outcomes, _first, _verdict
from ..wire import Raw, encode

__all__ = [
    "equivalence_escapes",
    "equivalence_key_order",
    "equivalence_meta",
    "equivalence_numbers",
    "equivalence_whitespace",
    "no_normalization",
]


async def equivalence_meta(ctx: Context) -> Outcomes:
    """A retry that differs only in `_meta` (a fresh progressToken, a vendor key) is a replay."""
    check = "sep-3182-equivalence-meta-ignored"
    key, label = ctx.fresh("k"), ctx.fresh("meta")
    first = await ctx.call(RECORD, {"label": label}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    metas = [
        {"progressToken": ctx.fresh("progress")},
        {"progressToken": 7, "com.example/trace": ctx.fresh("trace")},
    ]
    for meta in metas:
        again = await ctx.call(RECORD, {"label": label}, key, extra={"_meta": meta})
        if not again.same_result(first):
            return {
                check: (
                    "fail",
                    f"a retry differing only in _meta {encode(meta)} was not a replay: "
                    f"{again.show()} (a real client's retry with a fresh progressToken would "
                    "be refused or run again)",
                )
            }
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1,
            "retries differing only in _meta (progressToken, a vendor key) were replays",
            f"retries differing only in _meta were executed ({count} executions)",
        )
    }


async def _equivalent(ctx: Context, check: str, what: str, variants: list[str]) -> Outcomes:
    """The same logical arguments written as different JSON texts: one execution, one result."""
    key, label = ctx.fresh("k"), ctx.fresh("eq")
    texts = [v.replace("LABEL", label) for v in variants]
    first = await ctx.call(RECORD, Raw(texts[0]), key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    for text in texts[1:]:
        again = await ctx.call(RECORD, Raw(text), key)
        if not again.same_result(first):
            return {
                check: ("fail", f"{what}: {text} was not matched with {texts[0]}: {again.show()}")
            }
    count = await ctx.count(label)
    return {
        check: _verdict(
            count == 1, f"{what}: one execution, one result", f"{what}: {count} executions"
        )
    }


async def equivalence_key_order(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-key-order",
        "key order",
        [
            '{"label": "LABEL", "payload": {"a": 1, "b": {"x": [1, 2], "y": null}}}',
            '{"payload": {"b": {"y": null, "x": [1, 2]}, "a": 1}, "label": "LABEL"}',
        ],
    )


async def equivalence_whitespace(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-whitespace",
        "whitespace",
        [
            '{"label":"LABEL","payload":{"a":[1,2,{"b":true}]}}',
            '{ \t"label" :  "LABEL" ,\t"payload" : { "a" : [ 1 ,2 , { "b" :true } ] } \t}',
        ],
    )


async def equivalence_escapes(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-escapes",
        "escapes",
        [
            '{"label": "LABEL", "payload": "caf\u00e9 \\"q\\" a/b \U0001f600"}',
            '{"label": "LABEL", "payload": "caf\\u00e9 \\u0022q\\" a\\/b \\ud83d\\ude00"}',
        ],
    )


async def equivalence_numbers(ctx: Context) -> Outcomes:
    return await _equivalent(
        ctx,
        "sep-3182-equivalence-numbers",
        "numbers",
        [
            '{"label": "LABEL", "payload": {"n": 1, "m": [10, 2.5, -0.5]}}',
            '{"label": "LABEL", "payload": {"n": 1.0, "m": [1e1, 25e-1, -5E-1]}}',
            '{"label": "LABEL", "payload": {"n": 1e0, "m": [10.0, 2.50, -0.50]}}',
        ],
    )


async def no_normalization(ctx: Context) -> Outcomes:
    check = "sep-3182-no-unicode-normalization"
    key, label = ctx.fresh("k"), ctx.fresh("nfc")
    composed = unicodedata.normalize("NFC", "caf\u00e9")
    decomposed = unicodedata.normalize("NFD", composed)
    first = await ctx.call(RECORD, {"label": label, "payload": composed}, key)
    if (bad := await _first(ctx, (check,), first)) is not None:
        return bad
    other = await ctx.call(RECORD, {"label": label, "payload": decomposed}, key)
    count = await ctx.count(label)
    if other.same_result(first):
        return {check: ("fail", "NFD 'cafe\\u0301' was matched with NFC 'caf\\u00e9' (normalized)")}
    return {
        check: _verdict(
            other.rejected and count == 1,
            "NFC and NFD spellings are different arguments: a conflict",
            f"the NFD spelling was neither matched nor refused as a conflict: {other.show()}",
        )
    }
