"""A replay in the era its record was made in is the recorded answer (equal as a JSON value,
apart from the id); only a replay into the other era is re-enveloped.

Two upstreams: the raw one, which serves 2026-07-28 without `resultType` (as the independent
TypeScript 2026-07-28 servers do) and stamps `serverInfo` only when asked; and a Python-SDK
server without idemtools, which always writes both (mcp 2.x; 1.x serves 2025-11-25 only).
Compared here value by value, not through the conformance kit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conformance.kit import MODERN, server_command

from .helpers import Session, executions, proxy_argv
from .test_stdio import start

pytestmark = pytest.mark.slow

VERSION = "io.modelcontextprotocol/protocolVersion"
STAMP = "io.modelcontextprotocol/serverInfo"
META = {
    VERSION: MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "proxy-tests", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def call(
    s: Session, rid: int, key: str, modern: bool, name: str = "record", **arguments: Any
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments, "idempotencyKey": key}
    if modern:
        params["_meta"] = META
    reply = s.request(rid, "tools/call", params)
    assert "result" in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def legacy_of(result: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k != "resultType"}
    meta = {k: v for k, v in (out.pop("_meta", None) or {}).items() if k != STAMP}
    return {**out, "_meta": meta} if meta else out


def test_replays_of_an_upstream_without_result_type(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with start(tmp_path) as s:
        s.initialize()
        stamped = call(s, 1, "k-s", True, label="s", stamp=True)  # the proxy learns the stamp
        assert stamped["_meta"] == {STAMP: {"name": "raw-upstream", "version": "1.0"}}
        # Recorded in 2026-07-28 without resultType or stamp: replayed as it was, in that era.
        first = call(s, 2, "k-m", True, label="m")
        assert "resultType" not in first and "_meta" not in first
        assert call(s, 3, "k-m", True, label="m") == first
        assert call(s, 4, "k-m", False, label="m") == legacy_of(first)
        # Recorded in 2025-11-25: the same there; 2026-07-28 gets resultType and the stamp.
        old = call(s, 5, "k-l", False, label="l")
        assert call(s, 6, "k-l", False, label="l") == old
        assert call(s, 7, "k-l", True, label="l") == {
            **old,
            "resultType": "complete",
            "_meta": {STAMP: stamped["_meta"][STAMP]},
        }
        # A stamped 2026-07-28 record loses the stamp in 2025-11-25 only.
        assert call(s, 8, "k-s", True, label="s", stamp=True) == stamped
        assert call(s, 9, "k-s", False, label="s", stamp=True) == legacy_of(stamped)
        assert s.close() == 0
    assert [executions(log, label) for label in "sml"] == [1, 1, 1]


def session(tmp_path: Path, modern: bool) -> Session:
    upstream = server_command("highlevel", "--no-install")
    s = Session(proxy_argv("--store", f"sqlite:///{tmp_path / 'sdk.db'}", upstream=upstream))
    if modern:
        s.request(0, "server/discover", {"_meta": META})
    else:
        s.initialize()
    return s


@pytest.mark.sdk
def test_replays_of_the_python_sdk_in_both_eras(tmp_path: Path) -> None:
    pytest.importorskip("mcp_types", reason="mcp 1.x serves 2025-11-25 only")
    name = "sep3182_record"
    with session(tmp_path, modern=True) as new, session(tmp_path, modern=False) as old:
        first = call(new, 1, "k-new", True, name, label="n")
        assert first["resultType"] == "complete" and STAMP in first["_meta"]
        assert call(new, 2, "k-new", True, name, label="n") == first
        assert call(old, 3, "k-new", False, name, label="n") == legacy_of(first)
        legacy = call(old, 4, "k-old", False, name, label="o")
        assert "resultType" not in legacy
        assert call(old, 5, "k-old", False, name, label="o") == legacy
        assert call(new, 6, "k-old", True, name, label="o") == {
            **legacy,
            "resultType": "complete",
            "_meta": {STAMP: first["_meta"][STAMP]},
        }
        assert new.close() == 0 and old.close() == 0
