"""Typed accessors for the FastMCP 4.x (`fastmcp`) internals idemtools relies on, and their probe.

Every read of a private part of FastMCP goes through this module, so that a release that renames
one is caught by `probe()` when `install()` runs (`InstallError` naming it). Public API is used
wherever FastMCP has it (`get_tool`, `list_tools`, `call_tool(run_middleware=)`, whose absence
`FastMCPTools` reports with its own opt-out); what is left is listed in `INTERNALS`. Imported
only when a FastMCP server is installed on.
"""

# Imports follow the assert, so that mypy checks them on this SDK line's run only.
# ruff: noqa: E402
from __future__ import annotations

from ..._sdk import SDK2

assert SDK2, "imported on mcp 2.x only"

import functools
import importlib.metadata
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any

from fastmcp import FastMCP
from fastmcp.client.transports import memory as client_memory
from fastmcp.server import context as _context
from fastmcp.server import dependencies as _dependencies
from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool
from fastmcp.tools import FunctionTool
from fastmcp.tools.tool_transform import TransformedTool
from fastmcp.utilities import types as _fastmcp_types
from pydantic_core import to_json

from ._contact import Internal, set_by, sets_attribute
from ._contact import probe as _probe
from ._validated import Values, jsonable

__all__ = [
    "INTERNALS",
    "SDK",
    "called_from_memory_transport",
    "compose_interceptors",
    "function_validator",
    "lowlevel_of",
    "mounted",
    "probe",
    "renamed_from",
    "set_transport",
    "strict_input",
]

SDK = f"fastmcp {importlib.metadata.version('fastmcp')}"

_MEMORY_FILE = "fastmcp/client/transports/memory.py"


INTERNALS: tuple[Internal, ...] = (
    Internal(
        "fastmcp.FastMCP._mcp_server",
        lambda: (
            "_mcp_server" in inspect.get_annotations(FastMCP)
            or sets_attribute(FastMCP.__init__, "_mcp_server")
        ),
    ),
    set_by(lambda: FastMCPProviderTool.__init__, "FastMCPProviderTool._server"),
    set_by(lambda: FastMCPProviderTool.__init__, "FastMCPProviderTool._original_name"),
    Internal(
        "fastmcp.server.context.set_transport / reset_transport",
        lambda: callable(_context.set_transport) and callable(_context.reset_transport),
    ),
    Internal(
        "fastmcp.client.transports.memory calls Server.run (the in-memory transport)",
        lambda: sets_attribute(client_memory.FastMCPTransport.connect_session, "run"),
    ),
    # A derived key (`key_from`) comes from the values FastMCP's argument validation gives a
    # function tool: `function_validator` rebuilds that validation from these parts.
    Internal(
        "fastmcp.tools.FunctionTool.run validates through without_injected_parameters and "
        "get_cached_typeadapter",
        lambda: (
            sets_attribute(FunctionTool.run, "without_injected_parameters")
            and sets_attribute(FunctionTool.run, "get_cached_typeadapter")
            and callable(_dependencies.without_injected_parameters)
            and callable(_fastmcp_types.get_cached_typeadapter)
        ),
    ),
    Internal("fastmcp.tools.FunctionTool.fn", lambda: "fn" in FunctionTool.model_fields),
    set_by(lambda: FastMCP.__init__, "fastmcp.FastMCP.strict_input_validation"),
    Internal(
        "fastmcp.tools.tool_transform.TransformedTool.parent_tool / fn / forwarding_fn / "
        "transform_args",
        lambda: (
            {"parent_tool", "fn", "forwarding_fn", "transform_args"}
            <= set(TransformedTool.model_fields)
        ),
    ),
)


def probe(server: FastMCP[Any]) -> None:
    """Raise `InstallError` naming the first internal this FastMCP release lacks or changed."""
    _probe(SDK, INTERNALS)
    _probe(SDK, (Internal("FastMCP._mcp_server", lambda: lowlevel_of(server) is not None),))


def lowlevel_of(server: Any) -> Any:
    """The mcp 2.x low-level `Server` a FastMCP server dispatches through, else None."""
    return getattr(server, "_mcp_server", None) if isinstance(server, FastMCP) else None


def mounted(tool: Any) -> tuple[Any, str | None]:
    """(the child server, the tool's name there) when `tool` delegates to a mounted server."""
    if isinstance(tool, FastMCPProviderTool):
        original = tool._original_name
        return tool._server, original if isinstance(original, str) else None
    return None, None


def compose_interceptors(server: Any) -> Callable[..., Any] | None:
    """FastMCP's `_compose_tool_call_interceptors` (releases with extension interceptors)."""
    compose = getattr(server, "_compose_tool_call_interceptors", None)
    return compose if callable(compose) else None


def set_transport(kind: Any) -> Any:
    return _context.set_transport(kind)


def reset_transport(token: Any) -> None:
    _context.reset_transport(token)


def called_from_memory_transport(depth: int) -> bool:
    """Whether the caller `depth` frames up is FastMCP's in-memory `Client(server)` transport."""
    caller = sys._getframe(depth + 1).f_code.co_filename.replace("\\", "/")
    return caller.endswith(_MEMORY_FILE)


def strict_input(server: Any) -> bool:
    """`FastMCP(strict_input_validation=...)` of the server that runs a tool (FastMCP reads it
    off the server whose context the tool runs in: a mounted server's own)."""
    return bool(getattr(server, "strict_input_validation", False))


def renamed_from(tool: Any) -> Any:
    """The tool a `TransformedTool` forwards to when it changes nothing but the name (a
    `tool_names=` rename): no argument transform, no function of its own, so its arguments
    reach the parent as sent. Else None (its arguments are mapped: not the parent's)."""
    if (
        isinstance(tool, TransformedTool)
        and not tool.transform_args
        and tool.fn is tool.forwarding_fn
    ):
        return tool.parent_tool
    return None


def function_validator(tool: Any, *, strict: bool) -> Values | None:
    """`values(arguments)`: the values FastMCP's validation gives a function tool's function,
    as JSON values; raises what that validation raises. None: not a plain `FunctionTool` (a
    subclass that runs its own way, any other tool class): no validation to reuse.

    FastMCP validates with a `TypeAdapter` of the function (its injected parameters left
    out, `without_injected_parameters`), which also calls it. The same adapter is built here
    over a stand-in with the same signature and annotations that returns the arguments it was
    called with (FastMCP mirrors a function the same way for its own wrappers), and
    `strict_input_validation` is honoured as FastMCP honours it (JSON mode, strict).
    """
    if not isinstance(tool, FunctionTool) or type(tool).run is not FunctionTool.run:
        return None
    try:
        adapter, signature = _arguments_adapter(tool.fn)
    except TypeError:  # an unhashable callable: not cached
        adapter, signature = _arguments_adapter.__wrapped__(tool.fn)

    def values(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        if strict:
            called = adapter.validate_json(to_json(dict(arguments)), strict=True)
        else:
            called = adapter.validate_python(dict(arguments))
        args, kwargs = called  # FastMCP refuses `**kwargs` tools: every value has its name
        return jsonable(signature.bind_partial(*args, **kwargs).arguments)

    return values


def _mirror(fn: Callable[..., Any], body: Callable[..., Any]) -> Callable[..., Any]:
    """`body` with `fn`'s parameters and their annotations, as FastMCP mirrors a function for
    the `TypeAdapter` it validates with (resolved hints, else the signature's own annotations)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:
        hints = {}
    # The parameters only: the stand-in's return value is never the function's.
    signature = inspect.signature(fn).replace(return_annotation=inspect.Signature.empty)
    annotations: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if name in hints:
            annotations[name] = hints[name]
        elif parameter.annotation is not inspect.Parameter.empty:
            annotations[name] = parameter.annotation
    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__annotations__ = annotations
    body.__name__ = getattr(fn, "__name__", "tool")
    body.__qualname__ = getattr(fn, "__qualname__", body.__name__)
    body.__module__ = getattr(fn, "__module__", body.__module__)
    return body


@functools.lru_cache(maxsize=1024)
def _arguments_adapter(fn: Callable[..., Any]) -> tuple[Any, inspect.Signature]:
    """The adapter FastMCP validates `fn`'s arguments with, over a stand-in that returns
    `(args, kwargs)` instead of running `fn`; and the signature it binds them to."""
    body = _mirror(fn, _fresh_stand_in())
    exposed = _dependencies.without_injected_parameters(body)
    final = _mirror(exposed, _fresh_stand_in())
    return _fastmcp_types.get_cached_typeadapter(final), inspect.signature(final)


def _fresh_stand_in() -> Callable[..., Any]:
    """A new function object each time (its signature and annotations are set on it)."""

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return args, kwargs

    return stand_in
