"""Every change idemtools makes to an SDK class or model, in one place, each applied once.

Why one module: a patched class is process-wide, so what idemtools changed must be easy to see
and to account for. Each patch records itself in `applied_patches()` the first time it runs;
running it again changes nothing. The server adapters apply them from `install()`. The client
(`idemtools.client`) changes no class or model a server uses: its one patch is on the SDK's
`ClientSession` (`client_mcp2.observe_capabilities`, recorded here through `record_client_patch`).

- `declare_key_field()`: `idempotencyKey` (attribute `idempotency_key`) on the installed SDK's
  `CallToolRequestParams`, and the models that embed it rebuilt (see `idemtools._sdk.fields`).
- `declare_capability_field()` (mcp 2.x): `idempotency` on `ToolsCapability`. Nothing in
  idemtools applies it (the client reads the capability through `ClientSession` alone,
  `client_mcp2`); it is there for code that wants the field on the model. It serializes to
  nothing when unset.
- `bypass_response_cache(keyed)` (FastMCP): `ResponseCachingMiddleware.on_call_tool` steps aside
  while `keyed()` is true, so a keyed call is never answered from, or written to, the cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..._sdk import SDK2
from ..._sdk import fields as _fields
from ..._sdk.registry import applied_patches, record_patch

__all__ = [
    "applied_patches",
    "bypass_response_cache",
    "declare_capability_field",
    "declare_key_field",
    "record_client_patch",
]

_record = record_patch
record_client_patch = record_patch  # the name the client halves used


def declare_key_field() -> None:
    """Declare `idempotencyKey` on the installed SDK line's `CallToolRequestParams` (once)."""
    if SDK2:
        import mcp_types as types2

        if _record("key_field", "mcp_types.CallToolRequestParams.idempotency_key (idempotencyKey)"):
            _fields.declare(
                types2.CallToolRequestParams,
                [
                    lambda: types2.CallToolRequestParams.model_rebuild(force=True),
                    lambda: types2.CallToolRequest.model_rebuild(force=True),
                    lambda: types2.client_request_adapter.rebuild(force=True),
                ],
            )
    else:
        from mcp import types as types1

        if _record("key_field", "mcp.types.CallToolRequestParams.idempotency_key (idempotencyKey)"):
            _fields.declare(
                types1.CallToolRequestParams,
                [
                    lambda: types1.CallToolRequestParams.model_rebuild(force=True),
                    lambda: types1.CallToolRequest.model_rebuild(force=True),
                    lambda: types1.ClientRequest.model_rebuild(force=True),
                ],
            )


def declare_capability_field() -> None:
    """mcp 2.x: let a client read `capabilities.tools.idempotency` (once; no-op on 1.x, whose
    capability models keep unknown keys)."""
    if SDK2 and _record("capability_field", "mcp_types.ToolsCapability.idempotency"):
        _declare_capability_field2()


def _declare_capability_field2() -> None:
    if SDK2:
        import mcp_types as types2
        from pydantic import Field
        from pydantic.fields import FieldInfo

        fields = types2.ToolsCapability.__pydantic_fields__
        if "idempotency" in fields:
            return
        fields["idempotency"] = FieldInfo.from_annotated_attribute(
            dict[str, Any] | None,  # type: ignore[arg-type]
            Field(default=None),
        )
        types2.ToolsCapability.__annotations__["idempotency"] = dict[str, Any] | None
        for model in (
            types2.ToolsCapability,
            types2.ServerCapabilities,
            types2.InitializeResult,
            types2.DiscoverResult,
        ):
            model.model_rebuild(force=True)
        types2.server_result_adapter.rebuild(force=True)


def bypass_response_cache(keyed: Callable[[], bool]) -> None:
    """FastMCP: `ResponseCachingMiddleware.on_call_tool` steps aside while `keyed()` (once).

    Why on the class: the cache may sit in the chain of any server, mounted ones included, and
    may be added after `install()`. Outside a keyed call it behaves exactly as before.
    """
    try:
        from fastmcp.server.middleware.caching import ResponseCachingMiddleware
    except ImportError:  # a fastmcp without the caching middleware: nothing to step around
        return
    if not _record(
        "response_cache", "fastmcp ResponseCachingMiddleware.on_call_tool (keyed calls bypass)"
    ):
        return
    original = ResponseCachingMiddleware.on_call_tool

    @functools.wraps(original)
    async def on_call_tool(self: Any, context: Any, call_next: Any) -> Any:
        if keyed():
            return await call_next(context)
        return await original(self, context, call_next)

    setattr(on_call_tool, "__idemtools_bypass__", True)  # noqa: B010
    setattr(ResponseCachingMiddleware, "on_call_tool", on_call_tool)  # noqa: B010
