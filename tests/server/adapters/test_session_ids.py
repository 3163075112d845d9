"""`sdk_session_id`'s table (id(object) → weak reference, id): an id per live object, never
another object's, and no entry left behind once the object is collected."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from typing import Any

import pytest

from idemtools import scopes
from idemtools.scopes import sdk_session_id
from tests.e2e.harness import LINE


class Session:
    pass


def test_each_object_gets_its_own_id_stable_while_it_lives() -> None:
    a, b = Session(), Session()
    first = sdk_session_id(a)
    assert sdk_session_id(a) == first != sdk_session_id(b)
    assert sdk_session_id(b) == sdk_session_id(b)


def test_the_table_empties_when_the_objects_are_collected() -> None:
    gc.collect()
    before = len(scopes._SESSION_IDS)
    sessions = [Session() for _ in range(50)]
    for session in sessions:
        sdk_session_id(session)
    cycle = Session()
    cycle.me = cycle  # type: ignore[attr-defined]  # collected by the cycle collector only
    sdk_session_id(cycle)
    assert len(scopes._SESSION_IDS) == before + 51
    del sessions, session, cycle
    gc.collect()
    assert len(scopes._SESSION_IDS) == before


def test_an_id_is_not_reused_after_its_object_is_collected() -> None:
    seen: dict[int, str] = {}
    reused = 0
    for _ in range(200):  # CPython hands a freed address to the next object of its size
        session = Session()
        found = sdk_session_id(session)
        if id(session) in seen:
            reused += 1
            assert found != seen[id(session)]
        seen[id(session)] = found
        del session
    assert reused  # the address was reused at least once, so the check above ran


def test_a_dead_entry_under_a_reused_id_is_replaced() -> None:
    gone = Session()
    dead = weakref.ref(gone)
    del gone
    assert dead() is None
    session = Session()
    scopes._SESSION_IDS[id(session)] = (dead, "stale")  # as if its callback had not run
    try:
        found = sdk_session_id(session)
        assert found != "stale" and len(found) == 32
        assert sdk_session_id(session) == found
    finally:
        scopes._SESSION_IDS.pop(id(session), None)


def test_a_late_callback_does_not_drop_a_newer_entry() -> None:
    session = Session()
    found = sdk_session_id(session)
    scopes._forget_session(weakref.ref(Session), id(session))  # some other reference's
    assert scopes._SESSION_IDS[id(session)][1] == found
    assert sdk_session_id(session) == found


def test_sessions_alive_at_interpreter_exit_leave_no_error() -> None:
    code = (
        "from idemtools.scopes import sdk_session_id\n"
        "class Session: pass\n"
        "kept = [Session() for _ in range(3)]\n"
        "cycle = Session(); cycle.me = cycle\n"
        "for s in [*kept, cycle]: sdk_session_id(s)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""


@pytest.mark.skipif(LINE != 2, reason="the mcp 2.x Connection")
async def test_mcp2_each_connection_its_own_id_and_none_left_after_it_closes(
    monkeypatch: Any,
) -> None:
    from mcp.client import Client
    from mcp.server.mcpserver import MCPServer

    import idemtools
    from idemtools.client.call import _sdk  # type: ignore[attr-defined]
    from idemtools.server.adapters import mcp2

    server = MCPServer("ids")

    @server.tool()
    async def add(a: int, b: int) -> int:
        return a + b

    idemtools.install(server)
    seen: list[Any] = []
    original = mcp2._context

    def context(*args: Any) -> Any:
        found = original(*args)
        seen.append(found)
        return found

    monkeypatch.setattr(mcp2, "_context", context)
    gc.collect()
    before = len(scopes._SESSION_IDS)
    for _ in range(2):
        async with Client(server, mode="legacy") as client:
            for key in ("k1", "k2"):
                await _sdk.send_call(client.session, "add", {"a": 1, "b": 2}, key, None)
    # every field where `_context` puts it (positionally)
    for built in seen:
        assert (built.transport, built.auth, built.tool) == ("memory", None, "add")
        assert built.arguments == {"a": 1, "b": 2} and built.raw.method == "tools/call"
    one, same, other, same_other = (built.session_id for built in seen)
    assert one == same and other == same_other and one != other
    assert one is not None and other is not None
    seen.clear()  # their `raw` holds the connections
    del built
    gc.collect()
    assert len(scopes._SESSION_IDS) == before
