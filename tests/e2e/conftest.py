from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from .harness import ERAS, LEGACY, MODERN, App, http_wire, make_app, memory_wire, serve_http

WIRES = ["memory", "http-stateful", "http-stateless"]
CASES = [(w, LEGACY) for w in WIRES] + [(w, MODERN) for w in WIRES[1:] if MODERN in ERAS]

Served = Callable[..., contextlib.AbstractAsyncContextManager[tuple[App, Any]]]


@pytest.fixture(params=CASES, ids=[f"{w}-{e}" for w, e in CASES])
def served(request: pytest.FixtureRequest) -> Served:
    """`async with served() as (app, wire)`: every transport and era this mcp line serves.

    A context manager rather than an async fixture: the server's task group must be entered
    and left in the test's own task.
    """
    kind, era = request.param

    @contextlib.asynccontextmanager
    async def open_(**app_options: Any) -> AsyncIterator[tuple[App, Any]]:
        stateless = kind == "http-stateless"
        async with AsyncExitStack() as stack:
            wire: Any  # a MemoryWire or an HttpWire: the tests speak to either
            if kind == "memory":
                app = make_app(**app_options)
                wire = await stack.enter_async_context(memory_wire(app))
            else:
                app = make_app(auth=True, stateless=stateless, **app_options)
                url = stack.enter_context(serve_http(app, stateless=stateless))
                wire = await stack.enter_async_context(http_wire(url, era, token="tok-alice"))
            yield app, wire

    return open_
