"""Where idemtools touches an SDK's internals, named and checked: fail closed, never silently.

Each SDK line has one module of typed accessors (`sdk_mcp1`, `sdk_mcp2`, `sdk_fastmcp`), and each
declares the internals it relies on as `Internal`s. `install()` probes them all before it hooks
anything: a release that renamed or changed one raises `InstallError` naming it, instead of a
server that runs with a protection quietly missing. Internals that exist only on a live session
are probed through the classes that build them, and their accessors fail closed at the first
keyed call, with the same message, should a session still lack them.

SDK-free: this module only names and checks.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import CodeType

from ...errors import InstallError

__all__ = ["Internal", "SDKContactError", "changed", "probe", "set_by", "sets_attribute"]


class SDKContactError(InstallError):
    """An SDK internal idemtools relies on is missing or changed (see `Internal`)."""


def changed(sdk: str, internal: str, detail: str = "missing or changed") -> SDKContactError:
    return SDKContactError(
        f"idemtools cannot protect this server on {sdk}: {internal} is {detail}. This SDK "
        "release changed an internal idemtools relies on; keyed calls would run unprotected, "
        "so idemtools refuses. Use a supported release (README: Supported mcp versions)"
    )


@dataclass(frozen=True)
class Internal:
    """One SDK internal: its dotted name (what the error names) and a check that it still
    exists in the shape the accessor reads (True; False or an exception: changed)."""

    name: str
    check: Callable[[], object]


def probe(sdk: str, internals: Iterable[Internal]) -> None:
    """Raise `SDKContactError` naming the first internal whose check fails."""
    for internal in internals:
        try:
            ok = internal.check()
        except Exception as exc:
            raise changed(sdk, internal.name, f"missing or changed ({exc!r})") from exc
        if not ok:
            raise changed(sdk, internal.name)


def set_by(init: Callable[[], Callable[..., object]], name: str) -> Internal:
    """The internal `name` (dotted; its last part an attribute) that the function `init()`
    returns assigns; looked up when probed, so the probe sees the class as it is then."""
    attribute = name.rsplit(".", 1)[-1]
    return Internal(name, lambda: sets_attribute(init(), attribute))


def sets_attribute(init: Callable[..., object], attribute: str) -> bool:
    """Whether a function (a constructor) names `attribute` in its code or the code nested in
    it: read from its compiled code, nothing runs."""
    code = getattr(inspect.unwrap(init), "__code__", None)
    todo = [code] if isinstance(code, CodeType) else []
    while todo:
        code = todo.pop()
        if attribute in code.co_names:
            return True
        todo.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return False
