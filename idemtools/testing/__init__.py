"""Prove in your own test suite that a server is protected: one call, no network.

Forgetting `install(server)` is silent: the server starts, answers every call, and a keyed
retry simply runs the tool a second time. `assert_protected` catches that in a test:

    from idemtools.testing import assert_protected

    async def test_charge_is_safe_to_retry() -> None:
        await assert_protected(server, "charge", {"amount": 1, "currency": "usd"})

It connects to the server object in-process over the SDK's in-memory transport (mcp 1.x
`create_connected_server_and_client_session`, mcp 2.x `Client(server)`), checks that
`capabilities.tools.idempotency` is advertised, calls the tool twice with one key, and checks
that the second call was a replay: the tool ran once and both answers are the same. The tool
really runs once, so give it arguments that are harmless in a test.

With idemtools installed, pytest also offers the same check as the fixture `assert_protected`
(plugin `idemtools.testing.pytest_plugin`, registered through the `pytest11` entry point).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assertions import NotProtectedError, Protection, assert_protected, connect

__all__ = ["NotProtectedError", "Protection", "assert_protected", "connect"]


def __getattr__(name: str) -> Any:
    # Lazy: pytest loads `testing.pytest_plugin` in every run of a project that installed
    # idemtools, and that must not import the SDK (see the plugin).
    if name in __all__:
        from . import assertions

        return getattr(assertions, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
