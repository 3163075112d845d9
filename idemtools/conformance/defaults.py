"""Members a result may carry or leave out: present with their schema default, or absent.

The MCP schema gives two members of a `tools/call` result a default: `isError` (false) and, in
2026-07-28, `resultType` ("complete"). A client reads `{"isError": false}` and `{}` alike, so a
replay that differs from the original only by such a member, present in one and absent in the
other, returns the previously produced result as far as any client can tell: the MUST checks
accept it and say so in a note. Strict JSON-value equality, without this allowance, is a SHOULD
check of its own (`sep-3182-replay-json-equal`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .jsonvalues import strict_equal

__all__ = ["RESULT_DEFAULTS", "default_differences", "without_defaults"]

RESULT_DEFAULTS: Mapping[str, Any] = {"isError": False, "resultType": "complete"}


def without_defaults(result: Mapping[str, Any]) -> dict[str, Any]:
    """`result` without `_meta` and without any member that holds its schema default."""
    return {
        k: v
        for k, v in result.items()
        if k != "_meta" and not (k in RESULT_DEFAULTS and strict_equal(v, RESULT_DEFAULTS[k]))
    }


def default_differences(original: Mapping[str, Any], replay: Mapping[str, Any]) -> list[str]:
    """How the two differ by default-valued members only, in words ("the replay adds
    `isError: false`"); empty when no such member is present in one and absent in the other."""
    out: list[str] = []
    for name, default in RESULT_DEFAULTS.items():
        shown = f"`{name}: {json.dumps(default)}`"
        mine, theirs = name in original, name in replay
        if mine and not theirs and strict_equal(original[name], default):
            out.append(f"the replay leaves out {shown}, which the original had")
        elif theirs and not mine and strict_equal(replay[name], default):
            out.append(f"the replay adds {shown}, which the original left out")
    return out
