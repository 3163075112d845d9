"""The HTTP proxy as a multi-tenant edge: nothing of one caller reaches the upstream on another
caller's request, tokens are checked against the proxy's own audience before any record is
read, Host and Origin are validated by the proxy, compressed bodies are read before the
keyed-call check, and the proxy's answers and refusals are its own (in-process: an upstream
on a thread, the proxy under uvicorn as `serve_http` configures it)."""

from __future__ import annotations

import gzip
import json
import zlib
from http.cookiejar import CookieJar, DefaultCookiePolicy
from pathlib import Path
from typing import Any

import httpx
import pytest

from idemtools.cli import main as cli
from idemtools.proxy.auth import JwtVerifier
from idemtools.proxy.config import ProxyConfig, parse
from idemtools.proxy.guard import HostGuard, loopback_guard

from .edge import echo_upstream, serving
from .helpers import PY, UPSTREAM
from .test_http import AUDIENCE, ISSUER, issuer  # noqa: F401  (the fixture)

ACCEPT = "application/json, text/event-stream"
CLIENT = httpx.Client(timeout=20, cookies=CookieJar(DefaultCookiePolicy(allowed_domains=[])))
"""One client for every request (a new one costs an SSL context); it keeps no cookies."""


def call(rid: Any, name: str, key: str | None = None, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if key is not None:
        params["idempotencyKey"] = key
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def post(
    url: str, body: Any, token: str | None = None, *, cookie: str | None = None, **headers: str
) -> httpx.Response:
    """One request on a fresh connection: the client keeps no cookies either."""
    sent = {"accept": ACCEPT, "content-type": "application/json", **headers}
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    if cookie is not None:
        sent["cookie"] = cookie
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return CLIENT.post(url + "/mcp", content=content, headers=sent)


@pytest.fixture
def refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command must refuse to start: serving instead fails the test (never hangs it)."""

    async def serve(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("the proxy started serving")

    monkeypatch.setattr("idemtools.proxy.http.serve_http", serve)


def token_hash() -> ProxyConfig:
    return ProxyConfig().with_overrides(scope="token-hash")


def test_no_cookie_or_credential_of_one_caller_reaches_the_upstream_on_anothers_request() -> None:
    with echo_upstream() as up, serving(up.url, token_hash(), confirm_ttl=0.0) as (url, _):
        # alice: a cookie of her own; the upstream answers each request with a session cookie.
        alice = {"token": "alice", "cookie": "pref=alice"}
        assert "result" in post(url, call(1, "echo", label="a-relay"), **alice).json()
        assert "result" in post(url, call(2, "record", "k-a", label="a-keyed"), **alice).json()
        batch = [call(3, "record", "k-ab", label="a-batch"), call(4, "echo", label="a-b2")]
        assert len(post(url, batch, **alice).json()) == 2
        # An error for a name alice's tool list lacks: the proxy reads it with her headers.
        assert "error" in post(url, call(5, "nope", "k-an", label="a-nope"), **alice).json()
        # bob: no cookie at all; "secret" is not his (the upstream lists it to alice only).
        bob: dict[str, Any] = {"token": "bob"}
        assert "result" in post(url, call(6, "echo", label="b-relay"), **bob).json()
        assert "result" in post(url, call(7, "record", "k-b", label="b-keyed"), **bob).json()
        assert len(post(url, [call(8, "record", "k-bb", label="b-batch")], **bob).json()) == 1
        for rid in (9, 10):  # "unknown tool" for bob, decided by bob's own tool list
            refused = post(url, call(rid, "secret", "k-bs", label="b-secret"), **bob).json()
            assert refused["error"]["message"] == "Unknown tool: secret"
        assert "result" in post(url, call(11, "echo", label="a-again"), **alice).json()
    bobs = [s for s in up.seen if s.header("authorization") == "Bearer bob"]
    kinds = {json.dumps(m.get("method")) for s in bobs for m in s.messages}
    assert {'"tools/call"', '"tools/list"', '"ping"'} <= kinds  # relayed, own, confirmation
    for seen in bobs:
        assert seen.header("cookie") is None, seen  # bob sent none: the proxy adds none
    for seen in up.seen:
        if seen.header("authorization") == "Bearer alice":
            cookie = seen.header("cookie")
            own = any(m.get("method") in ("tools/list", "ping") for m in seen.messages)
            # Her own Cookie exactly on what she sent; her own or none on the proxy's requests.
            assert cookie == "pref=alice" or (own and cookie in (None, "pref=alice")), seen
    # bob's unknown tool was not recorded: alice's tool list (which has it) did not decide.
    secrets = [m for s, m in up.calls() if m["params"]["name"] == "secret"]
    assert len(secrets) == 2


def test_issuer_without_audience_refuses_to_start(
    refuses: None,
    capsys: pytest.CaptureFixture[str],
    issuer: Any,  # noqa: F811
) -> None:
    argv = ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--listen", "127.0.0.1:0"]
    assert cli([*argv, "--issuer", ISSUER, "--jwks-url", issuer.jwks]) == 2
    assert "--audience" in capsys.readouterr().err


@pytest.mark.parametrize("scope", ["token-hash", "shared", "subject"])
def test_a_token_for_another_audience_gets_no_replay_and_no_execution(
    scope: str,
    issuer: Any,  # noqa: F811
) -> None:
    verifier = JwtVerifier(ISSUER, issuer.jwks, AUDIENCE)
    config = ProxyConfig().with_overrides(scope=scope)
    with echo_upstream() as up, serving(up.url, config, verifier=verifier) as (url, _):
        first = post(url, call(1, "record", "k-aud", label="aud"), issuer("alice")).json()
        assert "result" in first
        for foreign in (issuer("alice", aud="calendar-api"), issuer("alice", ttl=-60), "opaque"):
            refused = post(url, call(2, "record", "k-aud", label="aud"), foreign).json()
            assert refused["error"]["data"]["type"] == "idempotency_unauthorized"
        assert post(url, call(3, "record", "k-aud", label="aud")).json()["error"]  # no token
    assert up.executions("aud") == 1


def test_a_token_without_aud_does_not_verify(issuer: Any) -> None:  # noqa: F811
    verifier = JwtVerifier(ISSUER, issuer.jwks, AUDIENCE)
    assert verifier._verify(issuer("alice")) is not None
    assert verifier._verify(issuer("alice", aud=None)) is None


def test_host_and_origin_are_validated_by_the_proxy_before_anything_is_relayed() -> None:
    with echo_upstream() as up, serving(up.url) as (url, _):
        port = url.rsplit(":", 1)[1]
        for host, origin in [
            ("evil.example.com", None),
            (f"evil.example.com:{port}", None),
            (f"127.0.0.1:{port}", "http://evil.example.com"),
            (f"localhost:{port}", "null"),
        ]:
            headers = {"host": host, **({"origin": origin} if origin else {})}
            refused = post(url, call(1, "echo", label="evil"), **headers)
            assert refused.status_code == 403, (host, origin)
            assert refused.json()["error"]["data"]["type"] == "invalid_host_or_origin"
        assert up.seen == []
        for host, origin in [
            (f"127.0.0.1:{port}", None),
            ("localhost", None),
            (f"LocalHost:{port}", "http://localhost:5173"),
            (f"[::1]:{port}", "http://127.0.0.1"),
        ]:
            headers = {"host": host, **({"origin": origin} if origin else {})}
            sent = {**headers, "x-forwarded-host": "evil.example.com"}
            assert post(url, call(1, "echo", label="ok"), **sent).status_code == 200
            seen = up.seen[-1]
            assert seen.header("host") == f"127.0.0.1:{up.port}"  # the upstream's own
            assert seen.header("origin") == origin  # the one the proxy accepted
            assert seen.header("x-forwarded-host") is None  # a Host nobody validated
            assert seen.header("accept-encoding") == "identity"  # answers as the proxy reads them


def test_host_patterns_match_as_the_sdks_do() -> None:
    guard = HostGuard(("mcp.example.com", "api.example.com:*"), ("https://app.example.com",))
    assert guard.refusal("mcp.example.com", None) is None
    assert guard.refusal("MCP.example.com", "https://app.example.com") is None
    assert guard.refusal("api.example.com:8443", None) is None
    assert guard.refusal("mcp.example.com:8443", None) is not None  # exact unless :*
    assert guard.refusal("api.example.com:x", None) is not None
    assert guard.refusal("api.example.com.evil.com:1", None) is not None
    assert guard.refusal(None, None) is not None
    assert guard.refusal("mcp.example.com", "https://app.example.com.evil.com") is not None
    anything = HostGuard(("*",))
    assert anything.refusal("whatever:1", None) is None
    assert anything.refusal("whatever", "https://a.example") is not None  # no origins named
    named = loopback_guard(("proxy.internal",))
    assert named.refusal("localhost:1", None) is not None  # named hosts replace the defaults


def test_non_loopback_listen_needs_allowed_hosts(
    refuses: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from idemtools.proxy.cli import _guard

    argv = ["proxy", "--upstream", "http://127.0.0.1:9/mcp", "--scope", "token-hash"]
    for listen in ("0.0.0.0:8080", "[::]:8080", "10.1.2.3:8080", "proxy.internal:8080"):
        assert cli([*argv, "--listen", listen]) == 2
        err = capsys.readouterr().err
        assert "--allowed-hosts" in err and "--allowed-origins" in err
    assert _guard("0.0.0.0:8080", ProxyConfig()) is None
    star = ProxyConfig().with_overrides(allowed_hosts=("*",))
    assert _guard("0.0.0.0:8080", star) == HostGuard(("*",))
    config = parse({"allowed_hosts": ["mcp.example.com"], "allowed_origins": ["https://a.b"]})
    assert _guard("0.0.0.0:8080", config) == HostGuard(("mcp.example.com",), ("https://a.b",))
    assert _guard("127.0.0.1:8080", ProxyConfig()) == loopback_guard()
    for bad in ({"allowed_hosts": "x"}, {"allowed_origins": [1]}, {"allowed_hosts": [""]}):
        with pytest.raises(ValueError, match="list of non-empty strings"):
            parse(bad)


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data)


def _raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("coding", "pack"),
    [
        ("gzip", _gzip),
        ("deflate", zlib.compress),
        ("deflate", _raw_deflate),
        ("gzip, deflate", lambda d: zlib.compress(_gzip(d))),
        ("identity", lambda d: d),
    ],
)
def test_compressed_keyed_calls_are_inflated_and_decided_by_the_engine(
    coding: str, pack: Any
) -> None:
    with echo_upstream() as up, serving(up.url, token_hash()) as (url, _):
        body = pack(json.dumps(call(1, "record", "k-z", label="z")).encode())
        answers = [post(url, body, "t", **{"content-encoding": coding}).json() for _ in range(3)]
    assert answers[0]["result"] == answers[1]["result"] == answers[2]["result"]
    assert up.executions("z") == 1
    (seen, message), *_ = up.calls()
    assert seen.header("content-encoding") is None  # relayed inflated
    assert "idempotencyKey" not in message["params"]


def test_bodies_the_proxy_cannot_read_are_answered_by_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("idemtools.proxy.http.MAX_BODY", 1 << 20)
    keyed = json.dumps(call(1, "record", "k-bad", label="bad")).encode()
    bomb = json.dumps(call(1, "record", "k-bomb", label="x" * (2 << 20))).encode()
    with echo_upstream() as up, serving(up.url, token_hash()) as (url, _):
        cases = [
            ({"content-encoding": "br"}, keyed, 415, "unsupported_content_encoding"),
            ({"content-encoding": "gzip, zstd"}, _gzip(keyed), 415, None),
            ({"content-encoding": "x-nonsense"}, keyed, 415, None),
            ({"content-encoding": "gzip"}, _gzip(bomb), 413, "body_too_large"),
            ({"content-encoding": "gzip"}, _gzip(keyed)[:-9], 400, "parse_error"),
            ({"content-encoding": "gzip"}, keyed, 400, None),
            ({}, b'{"jsonrpc":"2.0","id":1,"method":"tools/call",', 400, None),
            ({}, keyed.replace(b'"bad"', b'"b\xffd"'), 400, None),
            ({}, b"", 400, None),
            # A member named twice: valid JSON, but parsers disagree on which copy counts.
            ({}, keyed[:-1] + b',"params":{"name":"record","arguments":{}}}', 400, "repeated"),
            ({}, keyed.replace(b'"k-bad"', b'"k-bad","idempotencyKey":null'), 400, "repeated"),
        ]
        for headers, body, status, kind in cases:
            refused = post(url, body, "t", **headers)
            assert refused.status_code == status, (headers, body[:40], refused.text)
            error = refused.json()["error"]
            if kind == "repeated":  # the same answer as on stdio: an invalid request
                assert error["code"] == -32600 and "repeated" in error["message"]
                continue
            if kind is not None:
                assert error["data"]["type"] == kind
            if status == 400:
                assert error["code"] == -32700
        for method in ("GET", "DELETE", "PUT"):  # a body where Streamable HTTP has none
            sent = CLIENT.request(
                method, url + "/mcp", content=keyed, headers={"host": "localhost"}
            )
            assert sent.status_code == 400 and sent.json()["error"]["data"]["type"] == (
                "unexpected_body"
            )
    assert up.seen == []


def test_without_an_issuer_the_refusal_names_the_proxys_flags() -> None:
    with echo_upstream() as up, serving(up.url) as (url, _):
        refused = post(url, call(1, "record", "k-n", label="n"), "t").json()["error"]
    assert refused["data"]["type"] == "idempotency_scope_unavailable"
    assert "--issuer/--jwks-url/--audience" in refused["message"]
    assert "--scope token-hash" in refused["message"]
    assert "token verifier" not in refused["message"]
    assert up.executions("n") == 0


def test_answers_carry_the_upstreams_date_and_server_only() -> None:
    with echo_upstream() as up, serving(up.url, token_hash()) as (url, _):
        relayed = post(url, call(1, "echo", label="h"), "t")
        replayed = [post(url, call(2, "record", "k-h", label="h"), "t") for _ in range(2)]
    assert len(relayed.headers.get_list("date")) == 1
    assert [s for s in relayed.headers.get_list("server") if "uvicorn" in s.lower()] == []
    assert relayed.headers.get_list("server") and relayed.headers.get_list("set-cookie")
    for answer in replayed:  # the proxy's own answers: no header of uvicorn's
        assert "server" not in answer.headers and len(answer.headers.get_list("date")) <= 1


def test_docs_title_the_page_with_the_upstreams_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with echo_upstream() as up:
        assert cli(["proxy", "--docs", "--format", "json", "--upstream", up.url]) == 0
        assert json.loads(capsys.readouterr().out)["server"] == "echo-upstream"
    stdio = ["proxy", "--docs", "--format", "json", "--", PY, str(UPSTREAM), str(tmp_path / "l")]
    assert cli(stdio) == 0
    page = capsys.readouterr().out
    assert json.loads(page)["server"] == "raw-upstream" and str(UPSTREAM) not in page


RULED = {"tools": {"record": {"authorize": {"scopes": ["payments:write"]}}}}


def test_authorize_rules_gate_every_call_of_the_tool(issuer: Any) -> None:  # noqa: F811
    verifier = JwtVerifier(ISSUER, issuer.jwks, AUDIENCE)
    config = parse(RULED)
    writer, reader = issuer("alice", scope="payments:write"), issuer("alice", scope="read")
    with echo_upstream() as up, serving(up.url, config, verifier=verifier) as (url, _):
        for token in (reader, issuer("alice", aud="calendar-api", scope="payments:write"), None):
            refused = post(url, call(1, "record", label="plain"), token)
            assert refused.status_code == 200
            assert refused.json()["error"]["data"] == {
                "type": "idempotency_unauthorized",
                "notProcessed": True,
            }
            keyed = post(url, call(2, "record", "k-r", label="keyed"), token).json()
            assert keyed["error"]["data"]["type"] == "idempotency_unauthorized"
            batch = post(url, [call(3, "echo", label="b"), call(4, "record", label="b")], token)
            assert batch.status_code == 403
        assert up.seen == []
        assert "result" in post(url, call(5, "record", label="plain"), writer).json()
        assert "result" in post(url, call(6, "echo", label="other"), reader).json()  # no rule
        assert "result" in post(url, call(7, "record", "k-r", label="keyed"), writer).json()
    assert up.executions("plain") == 1 and up.executions("keyed") == 1


def test_authorize_rules_without_a_verifier_refuse_to_start(
    refuses: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "proxy.toml"
    path.write_text('[tools.record]\nauthorize = { scopes = ["payments:write"] }\n')
    http = ["--upstream", "http://127.0.0.1:9/mcp", "--listen", "127.0.0.1:0"]
    assert cli(["proxy", "--config", str(path), *http]) == 2
    assert "--issuer" in capsys.readouterr().err
    assert cli(["proxy", "--config", str(path), "--", PY, "-c", "pass"]) == 2
    assert "authorize rules" in capsys.readouterr().err


def test_the_proxy_keeps_no_cookie_jar() -> None:
    with echo_upstream() as up, serving(up.url, token_hash()) as (url, app):
        post(url, call(1, "echo", label="c"), "alice")
        post(url, call(2, "echo", label="c"), "alice")
        assert list(app.client.cookies.jar) == []
        assert up.seen[-1].header("cookie") is None
