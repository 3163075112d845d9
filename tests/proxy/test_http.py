"""The HTTP proxy: fail closed without a verified caller, JWT scopes and per-tool rules on
replays, an upstream lost mid-call, and the conformance kit over HTTP (both eras, JSON and SSE,
two callers, two proxies in front of two upstreams sharing one store)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.kit import ERAS, LEGACY, free_port, run_kit, server_command
from tests.conformance.test_proofs import NO_THROW
from tests.conformance.test_typescript import TS, node  # noqa: F401  (the fixture)
from tests.services import RUN_ID, need_redis

from .helpers import PY, ROOT, UPSTREAM, executions, received

pytestmark = pytest.mark.slow

ISSUER, AUDIENCE = "https://issuer.test", "mcp-proxy-tests"
ALICE = "Authorization: Bearer demo-alice"
BOB = "Authorization: Bearer demo-bob"


def with_prefix(url: str, prefix: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Any) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            log.seek(0)
            raise RuntimeError(f"did not start: {log.read().decode(errors='replace')[-1500:]}")
        time.sleep(0.05)


@contextlib.contextmanager
def process(argv: list[str], port: int) -> Iterator[subprocess.Popen[bytes]]:
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_port(port, proc, log)
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def proxy(upstream: str, port: int, *options: str) -> list[str]:
    listen = f"127.0.0.1:{port}"
    return [
        PY,
        "-m",
        "idemtools.cli",
        "proxy",
        "--upstream",
        upstream,
        "--listen",
        listen,
        *options,
    ]


def raw_upstream(log: Path, port: int) -> list[str]:
    return [PY, str(UPSTREAM), str(log), "--http", str(port)]


def post(url: str, message: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    # ASCII JSON text: escapes spell what UTF-8 cannot (a lone surrogate).
    answer = httpx.post(url, content=json.dumps(message), headers=headers, timeout=20)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def call(rid: int, name: str, key: str | None, **arguments: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if key is not None:
        params["idempotencyKey"] = key
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


@pytest.fixture
def raw(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    log, port = tmp_path / "log", free_port()
    with process(raw_upstream(log, port), port):
        yield log, port


def test_keyed_calls_without_a_verified_caller_are_refused(
    tmp_path: Path, raw: tuple[Path, int]
) -> None:
    log, up = raw
    port = free_port()
    with process(proxy(f"http://127.0.0.1:{up}/mcp", port), port):
        url = f"http://127.0.0.1:{port}/mcp"
        refused = post(url, call(1, "record", "k-anon", label="anon"), token="opaque")
        assert refused["error"]["data"]["type"] == "idempotency_scope_unavailable"
        assert "result" in post(url, call(2, "record", None, label="plain"), token="opaque")
    assert executions(log, "anon") == 0 and executions(log, "plain") == 1
    forwarded = [m for m in received(log) if m.get("method") == "tools/call"]
    assert forwarded[0]["headers"]["authorization"] == "Bearer opaque"  # passed through


@pytest.fixture(scope="module")
def issuer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    jwt = pytest.importorskip("jwt", reason="PyJWT (the proxy extra) verifies bearer JWTs")
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}))

    def token(
        sub: str, scope: str = "tools:write", aud: str | None = AUDIENCE, ttl: float = 300
    ) -> str:
        claims: dict[str, Any] = {"iss": ISSUER, "sub": sub, "exp": int(time.time() + ttl)}
        if aud is not None:
            claims["aud"] = aud
        claims["scope"] = scope
        encoded: str = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
        return encoded

    token.jwks = path.as_uri()  # type: ignore[attr-defined]
    return token


def test_jwt_scopes_by_subject_and_rules_gate_every_replay(
    tmp_path: Path, raw: tuple[Path, int], issuer: Any
) -> None:
    log, up = raw
    config = tmp_path / "proxy.toml"
    config.write_text('[tools.record]\nauthorize = { scopes = ["tools:write"] }\n')
    port = free_port()
    options = ("--issuer", ISSUER, "--jwks-url", issuer.jwks, "--audience", AUDIENCE)
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, *options, "--config", str(config))
    with process(argv, port):
        url = f"http://127.0.0.1:{port}/mcp"
        alice, bob = issuer("alice"), issuer("bob")
        first = post(url, call(1, "record", "k-j", label="j"), alice)
        assert post(url, call(2, "record", "k-j", label="j"), alice)["result"] == first["result"]
        # Another subject, the same key: another scope, its own execution.
        assert "result" in post(url, call(3, "record", "k-j", label="j"), bob)
        assert executions(log, "j") == 2
        # The rule runs before every replay: without the scope, no replay and no execution.
        reader = issuer("alice", scope="tools:read")
        denied = post(url, call(4, "record", "k-j", label="j"), reader)
        assert denied["error"]["data"]["type"] == "idempotency_unauthorized"
        # A token that no longer verifies (expired, another audience) gets no replay, whether
        # or not its tool has a rule: refused before any record is read.
        for stale in (issuer("alice", ttl=-60), issuer("alice", aud="someone-else")):
            gone = post(url, call(5, "record", "k-j", label="j"), stale)
            assert gone["error"]["data"]["type"] == "idempotency_unauthorized"
            unruled = post(url, call(6, "fail", "k-f", label="f"), stale)  # a tool without one
            assert unruled["error"]["data"]["type"] == "idempotency_unauthorized"
        assert executions(log, "j") == 2 and executions(log, "f") == 0


def test_upstream_lost_mid_call_over_http_is_recorded(tmp_path: Path) -> None:
    log, up, port = tmp_path / "log", free_port(), free_port()
    store = f"sqlite:///{tmp_path / 'proxy.db'}"
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash", "--store", store)
    with process(argv, port):
        url = f"http://127.0.0.1:{port}/mcp"
        with process(raw_upstream(log, up), up):
            lost = post(url, call(1, "die", "k-hd", label="hd"), "tok")
        assert lost["error"]["data"] == {
            "type": "idempotency_outcome_unknown",
            "idempotencyKey": "k-hd",
        }
        unreachable = post(url, call(2, "record", "k-down", label="down"), "tok")
        assert unreachable["error"]["code"] == -32603  # never sent: not recorded
        with process(raw_upstream(log, up), up):  # the upstream is back
            assert post(url, call(3, "die", "k-hd", label="hd"), "tok")["error"] == lost["error"]
            assert "result" in post(url, call(4, "record", "k-down", label="down"), "tok")
    assert executions(log, "hd") == 1 and executions(log, "down") == 1


@contextlib.contextmanager
def example(port: int, *extra: str) -> Iterator[str]:
    with process(server_command("example-no-install", "--http", str(port), *extra), port):
        yield f"http://127.0.0.1:{port}/mcp"


def test_kit_passes_over_stateless_http_with_two_callers_and_two_instances(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'shared.db'}"
    ports = [free_port() for _ in range(4)]
    with (
        example(ports[0], "--stateless") as one,
        example(ports[1], "--stateless") as two,
        process(proxy(one, ports[2], "--scope", "token-hash", "--store", store), ports[2]),
        process(proxy(two, ports[3], "--scope", "token-hash", "--store", store), ports[3]),
    ):
        front, also = (f"http://127.0.0.1:{p}/mcp" for p in ports[2:])
        kit = run_kit(tmp_path, "--header", ALICE, "--second-header", BOB, "--also", also, front)
    assert kit.failures() == set(), kit.out
    assert kit.code == 0 and kit.report["summary"]["eras"] == ERAS
    retention = {"sep-3182-retention-window", "sep-3182-retention-window-every-outcome"}
    assert kit.ids("skip") == retention, kit.out
    assert kit.ids("blocked") == NO_THROW, kit.out  # a fixture mcp 1.x FastMCP cannot offer
    for era in ERAS:
        capability = "capability-initialize" if era == LEGACY else "capability-discover"
        for check in ("scope-per-caller", "shared-store", capability):
            assert kit.check(f"sep-3182-{check}", era)["status"] == "pass"


def test_kit_passes_over_stateful_http_with_sse_answers(tmp_path: Path) -> None:
    ports = [free_port() for _ in range(2)]
    with (
        example(ports[0]) as upstream,
        process(proxy(upstream, ports[1], "--scope", "token-hash"), ports[1]),
    ):
        front = f"http://127.0.0.1:{ports[1]}/mcp"
        kit = run_kit(tmp_path, "--era", LEGACY, "--header", ALICE, "--second-header", BOB, front)
    assert kit.ids("fail") | kit.ids("blocked") == set(), kit.out
    assert kit.code == 0
    assert kit.check("sep-3182-scope-across-connections")["status"] == "pass"


@pytest.mark.services
def test_typescript_http_server_fails_alone_and_passes_behind_two_proxies(
    tmp_path: Path,
    node: str,  # noqa: F811
) -> None:
    """The TypeScript SDK 1.x serves the 2025-11-25 era only: this proof is that era's. The two
    proxies share one Redis, as two library servers would."""
    store = with_prefix(need_redis(), f"idemtools-proxy-{RUN_ID}-{time.monotonic_ns()}:")
    shared = ("--scope", "token-hash", "--store", store, "--retention", "120")  # then they go
    ports = [free_port() for _ in range(4)]
    server = str(TS / "http_server.mjs")
    with (
        process([node, server, str(ports[0])], ports[0]),
        process([node, server, str(ports[1])], ports[1]),
    ):
        one, two = (f"http://127.0.0.1:{p}/mcp" for p in ports[:2])
        alone = run_kit(tmp_path, "--header", ALICE, "--second-header", BOB, one)
        assert alone.code == 1 and "sep-3182-duplicate-not-executed" in alone.ids("fail")
        with (
            process(proxy(one, ports[2], *shared), ports[2]),
            process(proxy(two, ports[3], *shared), ports[3]),
        ):
            front, also = (f"http://127.0.0.1:{p}/mcp" for p in ports[2:])
            kit = run_kit(
                tmp_path, "--header", ALICE, "--second-header", BOB, "--also", also, front
            )
    assert kit.ids("fail") | kit.ids("blocked") == set(), kit.out
    assert kit.code == 0 and kit.report["summary"]["eras"] == [LEGACY]
    retention = {"sep-3182-retention-window", "sep-3182-retention-window-every-outcome"}
    no_pad = {"sep-3182-replay-large-outcome"}  # this fixture server has no `pad` argument
    assert kit.ids("skip") == retention | no_pad, kit.out


def test_cancellation_of_a_keyed_call_over_http_is_not_forwarded(
    tmp_path: Path, raw: tuple[Path, int]
) -> None:
    import threading

    log, up = raw
    port = free_port()
    with process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port):
        url = f"http://127.0.0.1:{port}/mcp"
        answers: list[dict[str, Any]] = []
        keyed = threading.Thread(
            target=lambda: answers.append(
                post(url, call(1, "slow", "k-hc", label="hc", ms=800), "t")
            )
        )
        keyed.start()
        deadline = time.monotonic() + 10
        while executions(log, "hc") == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
        headers = {"authorization": "Bearer t", "accept": "application/json, text/event-stream"}
        assert httpx.post(url, json=cancel, headers=headers, timeout=10).status_code == 202
        other = {**cancel, "params": {"requestId": 99}}  # not a keyed call in flight: forwarded
        assert httpx.post(url, json=other, headers=headers, timeout=10).status_code == 202
        keyed.join(20)
        assert "result" in answers[0]
        assert (
            post(url, call(2, "slow", "k-hc", label="hc", ms=800), "t")["result"]
            == answers[0]["result"]
        )
    cancels = [m for m in received(log) if m.get("method") == "notifications/cancelled"]
    assert [m["params"]["requestId"] for m in cancels] == [99]
    assert executions(log, "hc") == 1


def test_events_before_a_keyed_answer_reach_the_client_as_sse(
    tmp_path: Path, raw: tuple[Path, int]
) -> None:
    log, up = raw
    port = free_port()
    with process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port):
        url = f"http://127.0.0.1:{port}/mcp"
        message = call(1, "slow", "k-sse", label="sse", ms=10)
        message["params"]["_meta"] = {"progressToken": "p1"}
        headers = {"authorization": "Bearer t", "accept": "application/json, text/event-stream"}
        first = httpx.post(url, json=message, headers=headers, timeout=20)
        assert first.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line[5:]) for line in first.text.splitlines() if line.startswith("data:")
        ]
        assert events[0]["method"] == "notifications/progress"
        assert events[0]["params"]["progressToken"] == "p1"
        assert events[-1]["id"] == 1 and "result" in events[-1]
        replay = httpx.post(url, json={**message, "id": 2}, headers=headers, timeout=20)
        assert replay.headers["content-type"] == "application/json"  # the replay: JSON
        assert replay.json()["result"] == events[-1]["result"]
    assert executions(log, "sse") == 1


def test_sigterm_mid_call_over_http_finishes_and_records(tmp_path: Path) -> None:
    import threading

    log, up, port = tmp_path / "log", free_port(), free_port()
    store = f"sqlite:///{tmp_path / 'proxy.db'}"
    options = ("--scope", "token-hash", "--store", store)
    with process(raw_upstream(log, up), up):
        url = f"http://127.0.0.1:{port}/mcp"
        with process(proxy(f"http://127.0.0.1:{up}/mcp", port, *options), port) as front:
            answers: list[dict[str, Any]] = []
            slow = call(1, "slow", "k-ht", label="ht", ms=1200)
            keyed = threading.Thread(target=lambda: answers.append(post(url, slow, "t")))
            keyed.start()
            deadline = time.monotonic() + 10
            while executions(log, "ht") == 0 and time.monotonic() < deadline:
                time.sleep(0.02)
            front.terminate()
            keyed.join(20)
            # uvicorn shuts down gracefully, then re-raises the signal (exit status 143).
            assert front.wait(20) in (0, -15)
        assert "result" in answers[0], answers
        with process(proxy(f"http://127.0.0.1:{up}/mcp", port, *options), port):
            assert post(url, slow, "t")["result"] == answers[0]["result"]
    assert executions(log, "ht") == 1


def test_http_refusals_are_relayed_unrecorded_and_5xx_is_outcome_unknown(
    tmp_path: Path, raw: tuple[Path, int]
) -> None:
    log, up = raw
    port = free_port()
    with process(proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash"), port):
        url = f"http://127.0.0.1:{port}/mcp"
        headers = {"authorization": "Bearer t", "accept": "application/json, text/event-stream"}
        for rid in (1, 2):  # 401 ran nothing: relayed as it came, and the retry is sent again
            refused = httpx.post(
                url, json=call(rid, "record", "k-401", label="r401", status=401), headers=headers
            )
            assert refused.status_code == 401 and refused.text == "refused"
            assert refused.headers["www-authenticate"] == 'Bearer realm="test"'
        failed = post(url, call(3, "record", "k-503", label="r503", status=503), "t")
        assert failed["error"]["data"]["type"] == "idempotency_outcome_unknown"
        again = post(url, call(4, "record", "k-503", label="r503", status=503), "t")
        assert again["error"] == failed["error"]
    tried = [m for m in received(log) if m.get("method") == "tools/call"]
    assert [m["params"]["arguments"]["label"] for m in tried] == ["r401", "r401", "r503"]


def test_a_lone_surrogate_in_the_arguments_is_relayed_and_replayed(
    raw: tuple[Path, int], tmp_path: Path
) -> None:
    # JSON may spell a lone surrogate as an escape; Python reads it into a str that UTF-8
    # cannot encode. The proxy relays it escaped, as it came, and records the call.
    log, up = raw
    port = free_port()
    store = f"sqlite:///{tmp_path / 'proxy.db'}"
    argv = proxy(f"http://127.0.0.1:{up}/mcp", port, "--scope", "token-hash", "--store", store)
    with process(argv, port):
        url = f"http://127.0.0.1:{port}/mcp"
        first = post(url, call(1, "record", "k-sur", label="sur", text="\ud800x"), "tok")
        again = post(url, call(2, "record", "k-sur", label="sur", text="\ud800x"), "tok")
    assert "result" in first, first
    assert again["result"] == first["result"]
    assert executions(log, "sur") == 1
