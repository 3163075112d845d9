"""The record of every change idemtools made to an SDK class in this process.

A leaf of its own, shared by the server adapters and the client halves, so that a client
records its one patch without loading any server code, and `applied_patches()` still lists
both sides.
"""

from __future__ import annotations

__all__ = ["applied_patches", "record_patch"]

_APPLIED: dict[str, str] = {}


def applied_patches() -> dict[str, str]:
    """What idemtools changed in SDK classes in this process: patch name → what it changed."""
    return dict(_APPLIED)


def record_patch(name: str, what: str) -> bool:
    """True the first time `name` is applied (the caller then applies it); False after."""
    if name in _APPLIED:
        return False
    _APPLIED[name] = what
    return True
