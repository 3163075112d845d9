"""install() fails closed on a changed SDK internal, and the canaries.

The canary tests run the probe of the installed SDK line against the installed release: each
internal idemtools reads is checked on its own, so a CI leg on a new release names what moved.
The breaking tests remove one internal on purpose and expect `install()` to refuse, naming it,
with the server left untouched.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

import idemtools
from idemtools import InstallError
from idemtools.server.adapters import SDK2, lowlevel_of
from idemtools.server.adapters._contact import Internal, SDKContactError, probe

HAS_FASTMCP = SDK2 and importlib.util.find_spec("fastmcp") is not None


def _internals() -> tuple[Internal, ...]:
    if SDK2:
        from idemtools.server.adapters import sdk_mcp2

        return sdk_mcp2.INTERNALS
    from idemtools.server.adapters import sdk_mcp1

    return sdk_mcp1.INTERNALS


def _high_level() -> Any:
    if SDK2:
        from mcp.server.mcpserver import MCPServer

        return MCPServer("canary")
    else:
        from mcp.server.fastmcp import FastMCP

        return FastMCP("canary")


def _low_level() -> Any:
    from mcp.server.lowlevel import Server

    return Server("canary")


@pytest.mark.parametrize("internal", _internals(), ids=lambda i: i.name)
def test_canary_each_internal_holds_on_the_installed_mcp(internal: Internal) -> None:
    probe("the installed mcp", (internal,))


@pytest.mark.skipif(not HAS_FASTMCP, reason="fastmcp not installed")
def test_canary_fastmcp_internals_hold() -> None:
    from idemtools.server.adapters import sdk_fastmcp

    for internal in sdk_fastmcp.INTERNALS:  # type: ignore[attr-defined]
        probe(sdk_fastmcp.SDK, (internal,))  # type: ignore[attr-defined]


@pytest.mark.parametrize("make", [_high_level, _low_level], ids=["high-level", "low-level"])
def test_canary_install_probes_and_passes(make: Any) -> None:
    server = make()
    installation = idemtools.install(server)
    assert installation.adapter.startswith("mcp2." if SDK2 else "mcp1.")


def test_a_failed_probe_names_the_internal() -> None:
    def gone() -> bool:
        raise AttributeError("_x")

    with pytest.raises(SDKContactError, match=r"mcp 9\.9: some\.Thing\._x is missing or changed"):
        probe("mcp 9.9", (Internal("some.Thing._x", gone),))
    with pytest.raises(InstallError, match=r"some\.Thing\._y is missing or changed"):
        probe("mcp 9.9", (Internal("some.Thing._y", lambda: False),))


def _untouched(server: Any) -> None:
    assert idemtools.installation_of(server) is None
    lowlevel = lowlevel_of(server)
    if SDK2:
        assert not any("Idempotency" in type(m).__name__ for m in lowlevel.middleware)
    else:
        assert not getattr(lowlevel, "__idemtools_guard__", False)


@pytest.mark.skipif(SDK2, reason="an mcp 1.x internal")
@pytest.mark.parametrize("make", [_high_level, _low_level], ids=["FastMCP", "low-level"])
def test_mcp1_dispatch_internal_removed_fails_install(monkeypatch: Any, make: Any) -> None:
    from mcp.server.lowlevel.server import Server

    server = make()
    monkeypatch.delattr(Server, "_handle_request")
    with pytest.raises(InstallError, match=r"Server\._handle_request"):
        idemtools.install(server)
    _untouched(server)


@pytest.mark.skipif(SDK2, reason="an mcp 1.x internal")
def test_mcp1_fastmcp_tool_manager_renamed_fails_install(monkeypatch: Any) -> None:
    from mcp.server.fastmcp import FastMCP  # type: ignore[attr-defined]  # mcp 1.x only

    original = FastMCP.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:  # a release that renamed it
        original(self, *args, **kwargs)
        self._tools = self.__dict__.pop("_tool_manager")

    monkeypatch.setattr(FastMCP, "__init__", init)
    server = FastMCP("renamed")
    with pytest.raises(InstallError, match=r"FastMCP\._tool_manager"):
        idemtools.install(server)
    _untouched(server)


@pytest.mark.skipif(not SDK2, reason="an mcp 2.x internal")
@pytest.mark.parametrize("make", [_high_level, _low_level], ids=["MCPServer", "low-level"])
def test_mcp2_session_connection_removed_fails_install(monkeypatch: Any, make: Any) -> None:
    """A live-session internal, probed through the constructor that sets it."""
    from mcp.server.session import ServerSession

    def init(self: Any, request_outbound: Any, connection: Any, **kwargs: Any) -> None:
        self._request_outbound = request_outbound
        self._conn = connection  # a release that renamed ServerSession._connection

    server = make()
    monkeypatch.setattr(ServerSession, "__init__", init)
    with pytest.raises(InstallError, match=r"ServerSession\._connection"):
        idemtools.install(server)
    _untouched(server)


@pytest.mark.skipif(not SDK2, reason="an mcp 2.x internal")
def test_mcp2_live_session_without_connection_fails_closed_at_the_call() -> None:
    from idemtools.server.adapters import sdk_mcp2

    class Session:  # a session of a release the probe did not see: no `_connection`
        pass

    with pytest.raises(SDKContactError, match=r"ServerSession\._connection"):
        sdk_mcp2.connection(Session())  # type: ignore[attr-defined]
    with pytest.raises(SDKContactError, match=r"ServerSession\._request_outbound"):
        sdk_mcp2.outbound(Session())  # type: ignore[attr-defined]


@pytest.mark.skipif(not HAS_FASTMCP, reason="fastmcp not installed")
def test_fastmcp_mounted_tool_internal_removed_fails_install(monkeypatch: Any) -> None:
    from fastmcp import FastMCP
    from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool

    def init(self: Any, server: Any, *args: Any, **kwargs: Any) -> None:
        self._server = server  # but no `_original_name` any more

    monkeypatch.setattr(FastMCPProviderTool, "__init__", init)
    server = FastMCP("broken")
    with pytest.raises(InstallError, match=r"FastMCPProviderTool\._original_name"):
        idemtools.install(server)
    assert idemtools.installation_of(server) is None


@pytest.mark.skipif(not SDK2, reason="an mcp 2.x live-session internal")
async def test_mcp2_keyed_call_fails_closed_when_a_live_session_internal_is_gone(
    monkeypatch: Any,
) -> None:
    """The same message as at install, as the keyed call's error; the tool does not run."""
    from idemtools.server.adapters import sdk_mcp2
    from idemtools.server.adapters._contact import changed
    from tests.server.adapters.test_install import _lowlevel_server, _twice

    runs: list[int] = []
    server = _lowlevel_server(runs)
    idemtools.install(server)

    def gone(session: Any) -> Any:
        raise changed(sdk_mcp2.SDK, "mcp.server.session.ServerSession._connection")  # type: ignore[attr-defined]

    monkeypatch.setattr(sdk_mcp2, "connection", gone)
    first, again = await _twice(server, "k-gone")
    for answer in (first, again):
        assert "ServerSession._connection is missing or changed" in answer["error"]["message"]
    assert runs == []
