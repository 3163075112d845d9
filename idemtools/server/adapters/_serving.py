"""Where a server reveals its transport: its stdio runner and its HTTP/SSE app builders.

Shared by the adapters of FastMCP (mcp 1.x), MCPServer (mcp 2.x) and FastMCP 4.x, which name
these entry points alike. Each wrapper only notes what is served (`ServingSink.note_serving`);
the scopes are checked when the server starts (`scope_fit`), never on a call.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..scope_fit import Serving
from ._adapted import ServingSink

__all__ = ["watch_entry_points"]


def watch_entry_points(
    server: Any,
    installation: ServingSink,
    *,
    authenticated: Callable[[], bool],
    stateless_default: Callable[[], bool],
    modern_era: bool,
) -> None:
    """Note the transport when `server` starts on stdio or builds its HTTP/SSE app."""
    run_stdio = getattr(server, "run_stdio_async", None)
    if run_stdio is not None:

        @functools.wraps(run_stdio)
        async def run_stdio_async(*args: Any, **kwargs: Any) -> Any:
            installation.note_serving(Serving("stdio", modern_era=modern_era))
            await installation._check_servings()  # before the first message is read
            return await run_stdio(*args, **kwargs)

        server.run_stdio_async = run_stdio_async

    for name in ("streamable_http_app", "http_app"):
        builder = getattr(server, name, None)
        if builder is not None:
            setattr(
                server,
                name,
                _http_builder(builder, installation, authenticated, stateless_default, modern_era),
            )

    sse = getattr(server, "sse_app", None)
    if sse is not None:

        @functools.wraps(sse)
        def sse_app(*args: Any, **kwargs: Any) -> Any:
            installation.note_serving(Serving("SSE", authenticated(), True, modern_era=False))
            return sse(*args, **kwargs)

        server.sse_app = sse_app


def _http_builder(
    builder: Callable[..., Any],
    installation: ServingSink,
    authenticated: Callable[[], bool],
    stateless_default: Callable[[], bool],
    modern_era: bool,
) -> Callable[..., Any]:
    try:
        signature: inspect.Signature | None = inspect.signature(builder)
    except (TypeError, ValueError):
        signature = None

    @functools.wraps(builder)
    def build(*args: Any, **kwargs: Any) -> Any:
        given: dict[str, Any] = dict(kwargs)
        if signature is not None:
            with contextlib.suppress(TypeError):  # the builder itself will say what is wrong
                given = dict(signature.bind_partial(*args, **kwargs).arguments)
        stateless = given.get("stateless_http")
        if stateless is None:
            stateless = stateless_default()
        if given.get("transport") == "sse":  # FastMCP's http_app(transport="sse")
            serving = Serving("SSE", authenticated(), True, modern_era=False)
        else:
            serving = Serving("HTTP", authenticated(), not stateless, modern_era=modern_era)
        installation.note_serving(serving)
        return builder(*args, **kwargs)

    return build
