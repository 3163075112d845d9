"""The retention document generator: golden files, every policy field, determinism, errors.

Golden files live in tests/golden/; after an intended change to the output, regenerate them
with `IDEMTOOLS_UPDATE_GOLDEN=1 pytest tests/test_docs.py` and review the diff.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemtools import (
    AuthInfo,
    CallContext,
    ErrorCodes,
    Policy,
    Registry,
    Scope,
    ScopeUnavailableError,
    by_auth_subject,
    by_client_id,
    idempotent,
    install,
    local_user,
    per_session,
    shared,
)
from idemtools.docs import (
    JSON_SCHEMA,
    NotInstalledError,
    ServerDoc,
    ServerImportError,
    SpecError,
    StoreDoc,
    ToolDoc,
    describe,
    format_duration,
    load_server,
    parse_spec,
    render_json,
    render_markdown,
    render_page,
)
from idemtools.docs.model import first_retry_after_ms
from idemtools.docs.render import _unbroken
from idemtools.errors import ErrorCodes as _Codes
from idemtools.server.adapters import SDK2

FIXTURE = "tests.fixtures_docs.server:server"
GOLDEN = Path(__file__).parent / "golden"


def nb(identifier: str) -> str:
    """An identifier as the page writes it in tables: code that does not break mid-word."""
    return f'<code style="white-space: nowrap">{identifier}</code>'


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("IDEMTOOLS_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8", newline="\n")
    assert path.exists(), f"{path} missing: run with IDEMTOOLS_UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from the golden file"


async def _fixture_doc() -> ServerDoc:
    return await describe(load_server(FIXTURE), source=FIXTURE)


async def test_markdown_matches_golden() -> None:
    _check_golden("fixture_server.md", render_markdown(await _fixture_doc()))


async def test_json_matches_golden() -> None:
    # The adapter name differs per mcp line (mcp1.fastmcp / mcp2.mcpserver); all else must not.
    doc = dataclasses.replace(await _fixture_doc(), adapter="<adapter>")
    _check_golden("fixture_server.json", render_json(doc))


async def test_adapter_is_reported() -> None:
    assert (await _fixture_doc()).adapter in ("mcp1.fastmcp", "mcp2.mcpserver")


async def test_every_policy_field_appears() -> None:
    doc = await _fixture_doc()
    text = render_markdown(doc)
    tools = text.split("## Tools")[1].split("## ")[0]
    rows = {line.split(" | ")[0][2:]: line for line in tools.splitlines() if line.startswith("| <")}
    expected = {
        # tool cell: (retention, lease, scope, transactional)
        nb("charge"): (
            "7 days (604800 s)",
            "2 minutes (120 s)",
            nb("by_auth_subject"),
            "requested, but this store has no transactions",
        ),
        nb("send_email"): (
            "1 hour 30 minutes (5400 s)",
            "30.5 seconds",
            r"per session (the session the SDK holds), else per tenant (the X-Tenant \| header)",
            "no",
        ),
        nb("ping") + " *(server default)*": (
            "36 hours (129600 s)",
            "45 seconds",
            nb("local_user"),
            "no",
        ),
    }
    assert "| Tool | Retention | Lease | Scope | Transactional |" in text
    for name, fields in expected.items():
        row = rows[name]
        cells = [cell.strip() for cell in row.strip().strip("|").split(" | ")]
        assert cells == [name, *fields], row
    assert "retention 36 hours (129600 s), lease 45 seconds" in text  # the server default
    assert "**in-process memory** (`memory`)" in text
    assert "lost when the server restarts" in text and "Per process" in text
    assert "256 MiB of records (`max_bytes`) and 100,000 live records" in text
    assert '"idempotencyKey": "5f0c6f0e-' in text and '"method": "tools/call"' in text
    assert '_meta["io.github.idemtools/replayed"]' in text  # the fixture sets mark_replays


async def test_the_in_progress_example_shows_the_servers_real_retry_after() -> None:
    """Not a made-up 250: the engine's rule for the example's tool, at the engine's cap."""
    doc = await _fixture_doc()
    text = render_markdown(doc)
    charge = next(t for t in doc.tools if t.name == "charge")  # lease 120 s, cap 1 s
    assert charge.lease_seconds == 120 and doc.max_retry_after_seconds == 1.0
    assert '"retryAfterMs": 1000' in text and "250" not in text.split("## Errors")[0]
    short = dataclasses.replace(
        doc,
        tools=tuple(dataclasses.replace(t, lease_seconds=0.5) for t in doc.tools),
        max_retry_after_seconds=2.0,
    )
    assert '"retryAfterMs": 125' in render_markdown(short)  # a quarter of a 0.5 s lease
    assert "125 ms for " + nb("charge") in render_markdown(short)


@given(
    lease=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    cap=st.floats(min_value=0, max_value=1e4, allow_nan=False),
)
def test_the_pages_retry_after_is_the_engines(lease: float, cap: float) -> None:
    from idemtools.engine.decision import retry_after_ms

    assert first_retry_after_ms(lease, cap) == retry_after_ms(lease, lease, cap)


def test_tool_names_never_break_inside_the_identifier() -> None:
    """Narrow screens: a tool name is one unbreakable piece of code (and `|` stays in it)."""
    assert _unbroken("send_email") == '<code style="white-space: nowrap">send_email</code>'
    assert _unbroken("a|b<c") == '<code style="white-space: nowrap">a&#124;b&lt;c</code>'


async def test_json_carries_the_same_fields() -> None:
    data = json.loads(render_json(await _fixture_doc()))
    assert data["schema"] == JSON_SCHEMA
    tools = {t["name"]: t for t in data["tools"]}
    assert sorted(tools) == ["charge", "ping", "send_email"]
    assert tools["charge"]["retention_seconds"] == 604800
    assert tools["send_email"]["lease_seconds"] == 30.5
    assert tools["ping"]["policy"] == "server default"
    assert data["default"]["retention_seconds"] == 129600
    assert data["store"]["kind"] == "memory"
    assert data["max_key_length"] == 255 and data["mark_replays"] is True


async def test_errors_cover_every_error_code() -> None:
    doc = await _fixture_doc()
    fields = [f.name for f in dataclasses.fields(_Codes)]
    assert [e.type for e in doc.errors] == fields
    for error in doc.errors:
        assert error.meaning and error.action, f"{error.type} is undocumented in idemtools.docs"
        assert error.code == ErrorCodes().code_for(error.type)
    text = render_markdown(doc)
    for error in doc.errors:
        assert f"| {nb(error.type)} | {error.code} |" in text


async def test_deterministic_across_runs_and_fresh_imports() -> None:
    first = await _fixture_doc()
    again = await describe(load_server(FIXTURE, fresh=True), source=FIXTURE)
    assert render_markdown(first) == render_markdown(again)
    assert render_json(first) == render_json(again)
    assert render_markdown(first).encode() == render_markdown(first).encode()


async def test_custom_codes_and_store_kind_are_read_from_the_installation() -> None:
    server = _new_server("custom")
    install(server, codes=ErrorCodes(idempotency_key_conflict=-32099), max_key_length=64)
    doc = await describe(server)
    assert {e.type: e.code for e in doc.errors}["idempotency_key_conflict"] == -32099
    text = render_markdown(doc)
    assert f"| {nb('idempotency_key_conflict')} | -32099 |" in text
    assert "1 to 64 characters" in text
    assert "with no marker" in text
    assert doc.server == "custom"
    assert "does not list its tools' input schemas" not in text  # noop's schema is known
    unknown = dataclasses.replace(
        doc, tools=tuple(dataclasses.replace(t, example_arguments=None) for t in doc.tools)
    )
    assert "does not list its tools' input schemas" in render_markdown(unknown)


async def test_sqlite_store_is_described(tmp_path: Path) -> None:
    from idemtools.stores import SQLiteStore

    server = _new_server("durable")
    installation = install(server, store=SQLiteStore(tmp_path / "idem.db"))
    try:
        doc = await describe(server)
    finally:
        await installation.aclose()
    assert doc.store.kind == "sqlite"
    assert "survive restarts" in doc.store.restarts and "one host" in doc.store.instances


def _new_server(name: str) -> Any:
    if SDK2:
        from mcp.server.mcpserver import MCPServer as Server
    else:
        from mcp.server.fastmcp import FastMCP as Server
    server: Any = Server(name)

    @server.tool()
    def noop() -> str:
        return "ok"

    return server


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (1, "1 second"),
        (45, "45 seconds"),
        (30.5, "30.5 seconds"),
        (0.25, "0.25 seconds"),
        (60, "1 minute"),
        (90, "1 minute 30 seconds"),
        (3600, "1 hour"),
        (5400, "1 hour 30 minutes"),
        (86400, "24 hours"),
        (129600, "36 hours"),
        (172800, "2 days"),
        (604800, "7 days"),
        (90061, "25 hours 1 minute 1 second"),
        (60.5, "1 minute 0.5 seconds"),
    ],
)
def test_format_duration(seconds: float, words: str) -> None:
    assert format_duration(seconds) == words


def test_render_page_nests_several_servers() -> None:
    default = ToolDoc("(default)", True, "server default", 1, "1 second", 1, "1 second", "s", "no")
    doc = ServerDoc(
        server="a",
        source=None,
        adapter="x",
        store=StoreDoc("memory", "in-process memory", "lost", "per process"),
        default=default,
        tools=(),
        errors=(),
        max_key_length=255,
        max_outcome_bytes=1,
        mark_replays=False,
    )
    page = render_page([doc, dataclasses.replace(doc, server="b")], title="Retention")
    assert page.startswith("# Retention\n")
    assert "## Idempotency and retention: a" in page and "### Tools" in page
    assert "## Idempotency and retention: b" in page
    assert "*(no tools listed)*" in page
    assert render_page([doc], title="T").startswith("# T\n")


# -- loading errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["nocolon", "a:b:c", ":server", "mod:", "1mod:x", "a b:c", ""])
def test_bad_spec(spec: str) -> None:
    with pytest.raises(SpecError, match="module:attribute"):
        parse_spec(spec)
    with pytest.raises(SpecError):
        load_server(spec)


def test_dotted_attribute_is_accepted() -> None:
    assert parse_spec("pkg.mod:obj.server") == ("pkg.mod", "obj.server")


def test_missing_module() -> None:
    with pytest.raises(ServerImportError, match="no module named 'no_such_module_xyz'"):
        load_server("no_such_module_xyz.server:server")


def test_import_error_inside_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_server_mod.py").write_text("raise RuntimeError('database down')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ServerImportError, match="RuntimeError: database down"):
        load_server("broken_server_mod:server", fresh=True)
    assert "broken_server_mod" not in sys.modules


def test_missing_dependency_of_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_dep_mod.py").write_text("import not_installed_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ServerImportError, match="needs 'not_installed_dep_xyz'"):
        load_server("needs_dep_mod:server")


def test_module_that_exits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "exiting_mod.py").write_text("raise SystemExit(3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ServerImportError, match="exited while being imported"):
        load_server("exiting_mod:server")


def test_missing_attribute() -> None:
    with pytest.raises(ServerImportError, match="has no attribute 'nope'"):
        load_server("tests.fixtures_docs.server:nope")


def test_server_without_idemtools() -> None:
    with pytest.raises(NotInstalledError, match="does not have idemtools installed"):
        load_server("tests.fixtures_docs.server:plain")


async def test_describe_refuses_a_server_without_idemtools() -> None:
    with pytest.raises(NotInstalledError, match=r"idemtools\.install"):
        await describe(object())


async def test_fresh_import_sees_edits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "edited_server_mod.py"
    source = textwrap.dedent(
        """
        from idemtools import Policy, install
        from tests.test_docs import _new_server

        server = _new_server("edited")
        install(server, default_policy=Policy.of(retention=RETENTION))
        """
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module.write_text("RETENTION = 60\n" + source)
    first = await describe(load_server("edited_server_mod:server", fresh=True))
    # Same size, same second: a .pyc keyed on (mtime, size) would hide this edit.
    module.write_text("RETENTION = 90\n" + source)
    second = await describe(load_server("edited_server_mod:server", fresh=True))
    assert (first.default.retention, second.default.retention) == (
        "1 minute",
        "1 minute 30 seconds",
    )


# -- scopes per transport, the declared store ---------------------------------------------------


def _contexts() -> dict[str, list[CallContext]]:
    """Typical requests per transport the page describes: with and without what can be missing."""
    token = AuthInfo(issuer="https://issuer.test", subject="alice", client_id="app")
    return {
        "HTTP": [
            CallContext(transport="http", auth=token, session_id="s1"),
            CallContext(transport="http", auth=token),  # stateless HTTP
        ],
        "stdio": [
            CallContext(transport="stdio", session_id="s1"),
            CallContext(transport="memory", session_id="s2"),
        ],
    }


@pytest.mark.parametrize(
    "strategy",
    [local_user, by_auth_subject, by_client_id, per_session, shared],
    ids=lambda s: s.name,
)
def test_scope_labels_per_transport_match_what_the_scope_does(strategy: Scope) -> None:
    """A transport is labelled "refused" exactly when the strategy never answers there."""
    for transport, contexts in _contexts().items():
        answers: list[str | None] = []
        for ctx in contexts:
            try:
                answers.append(strategy(ctx))
            except ScopeUnavailableError:
                answers.append(None)
        words = strategy.on[transport]
        assert (words is None) == all(a is None for a in answers), (transport, words, answers)
        if words is not None and "local OS user" in words:
            assert set(answers) == {local_user(contexts[0])}, (transport, answers)


async def test_page_labels_each_scope_per_transport() -> None:
    server = _new_server("scoped")
    registry = Registry()

    @server.tool()
    @idempotent(scope=by_client_id, registry=registry)
    def machine() -> str:
        return "ok"

    install(server, registry=registry)  # noop: the default, by_auth_subject
    text = render_markdown(await describe(server))
    scopes = text.split("## Scopes")[1].split("## ")[0]
    assert "| Scope | over HTTP | over stdio (or in-memory) |" in scopes
    lines = scopes.splitlines()
    rows = {line.split(" | ")[0][2:]: line for line in lines if line.startswith("| <code")}
    assert rows[nb("by_auth_subject")].split(" | ")[1:] == [
        "per authenticated subject (token issuer + subject; needs an access token)",
        "the local OS user who started the server process |",
    ]
    assert rows[nb("by_client_id")].endswith("| refused: `idempotency_scope_unavailable` |")
    combined = by_auth_subject | per_session
    assert combined.name == "by_auth_subject | per_session"
    assert combined.on["stdio"] is not None and combined.on["stdio"].startswith("the local OS")


async def test_store_section_reads_the_declared_store(tmp_path: Path) -> None:
    from idemtools.stores import MemoryStore, SQLiteStore

    server = _new_server("bounded")
    install(server, store=MemoryStore(max_bytes=3 << 20, max_records=50, max_records_per_scope=7))
    text = render_markdown(await describe(server))
    assert "at most 3 MiB of records (`max_bytes`) and 50 live records (`max_records`)" in text
    assert "at most 7 live records per scope (`max_records_per_scope`)" in text
    server = _new_server("durable")
    installation = install(server, store=SQLiteStore(tmp_path / "idem.db", max_bytes=1000))
    try:
        doc = await describe(server)
    finally:
        await installation.aclose()
    assert doc.store.bound.startswith("at most 1,000 bytes of records (`max_bytes`).")
    assert doc.store.quota.startswith("none")
    assert str(tmp_path) not in render_markdown(doc)  # the store, not where the build ran


async def test_a_custom_scope_may_describe_itself_per_transport() -> None:
    by_tenant = Scope(lambda ctx: "t1", "per tenant", on={"HTTP": "per tenant (token claim)"})
    assert by_tenant.on == {"HTTP": "per tenant (token claim)", "stdio": "per tenant"}
    assert by_tenant(CallContext(transport="http")) == '["custom", "t1"]'  # still namespaced
    only_http = Scope(lambda ctx: "t1", "per tenant", on={"stdio": None})
    server = _new_server("tenants")
    install(server, default_policy=Policy.of(scope=only_http))
    scopes = render_markdown(await describe(server)).split("## Scopes")[1].split("## ")[0]
    assert "| per tenant | per tenant | refused: `idempotency_scope_unavailable` |" in scopes
