"""The reference server and its mutants, checked without the kit.

A surviving mutant must mean a blind spot of the kit, never a mutant that does not misbehave:
so the mutants of the kit's former blind spots and of the checks derived rule by rule are
probed here directly, over raw JSON-RPC, and must differ from the reference exactly where their
bug says. (The other mutants are proved by the kit itself.) The reference's equivalence is
property-tested against the SEP's rules.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import tempfile
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from . import mutants as catalogue
from .kit import PY, ROOT, free_port
from .reference_server import Pairs, canonical, parse_exact, raw_member
from .test_mutants import SERVER, _http_instance

pytestmark = [pytest.mark.sdk_free, pytest.mark.slow]

MODERN_META = {"io.modelcontextprotocol/protocolVersion": catalogue.MODERN}


class Stdio:
    """A reference server process and a minimal JSON-RPC client that keeps each raw line."""

    def __init__(self, *args: str) -> None:
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [PY, str(SERVER), *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.err,
        )
        self.ids = itertools.count(1)
        self.lines: dict[int, str] = {}
        self.arrived = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.decode()
            with self.arrived:
                self.lines[json.loads(text)["id"]] = text
                self.arrived.notify_all()

    def send(self, method: str, params: dict[str, Any]) -> int:
        rid = next(self.ids)
        assert self.proc.stdin is not None
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()
        return rid

    def line(self, rid: int, timeout: float = 10) -> str:
        with self.arrived:
            assert self.arrived.wait_for(lambda: rid in self.lines, timeout), "no answer"
            return self.lines[rid]

    def call(
        self, tool: str, arguments: dict[str, Any], key: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        reply: dict[str, Any] = json.loads(
            self.line(self.send("tools/call", _params(tool, arguments, key, extra)))
        )
        return reply

    def raw(self, tool: str, arguments: dict[str, Any], key: str | None = None) -> str:
        """The answer's `result` or `error` member exactly as the server wrote it."""
        text = self.line(self.send("tools/call", _params(tool, arguments, key, {})))
        found = raw_member(text, ("result",)) or raw_member(text, ("error",))
        assert found is not None
        return found

    def count(self, label: str) -> int:
        n: int = self.call("sep3182_count", {"label": label})["result"]["structuredContent"][
            "executions"
        ]
        return n

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.err.close()


def _params(tool: str, arguments: Any, key: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments, **extra}
    if key is not None:
        params["idempotencyKey"] = key
    return params


@contextmanager
def stdio(*args: str) -> Iterator[Stdio]:
    server = Stdio(*args)
    try:
        yield server
    finally:
        server.close()


def fresh(what: str = "x") -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def _type_strict(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_type_strict(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_type_strict, a, b))
    return bool(a == b)


# -- probes: each returns True when the server behaves as the SEP says -----------------------------


def throw_replayed(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.raw("sep3182_throw", {"label": label}, key)
    again = s.raw("sep3182_throw", {"label": label}, key)
    return s.count(label) == 1 and first == again and '"count": 1' in first


def original_replayed_after_in_progress(s: Stdio) -> bool:
    key, args = fresh("k"), {"label": fresh(), "ms": 400}
    original = s.send("tools/call", _params("sep3182_record_slow", args, key, {}))
    duplicate = s.call("sep3182_record_slow", args, key)
    first = json.loads(s.line(original))
    retry = s.call("sep3182_record_slow", args, key)
    refused = duplicate["error"]["data"]["type"] == "idempotency_key_in_progress"
    return bool(refused and retry.get("result") == first["result"])


def one_execution_late_in_a_run(s: Stdio) -> bool:
    """A duplicate sent well after the original started (past any short lease) runs nothing."""
    label = fresh()
    key, args = fresh("k"), {"label": label, "ms": 1500}
    original = s.send("tools/call", _params("sep3182_record_slow", args, key, {}))
    deadline = time.monotonic() + 10
    while s.count(label) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # until the original runs: the wait below starts from there
    time.sleep(0.6)
    duplicate = s.send("tools/call", _params("sep3182_record_slow", args, key, {}))
    s.line(original)
    s.line(duplicate)
    return s.count(label) == 1


def other_arguments_run_nothing_while_running(s: Stdio) -> bool:
    key, label, other = fresh("k"), fresh(), fresh()
    original = s.send(
        "tools/call", _params("sep3182_record_slow", {"label": label, "ms": 1500}, key, {})
    )
    refused = s.call("sep3182_record_slow", {"label": other, "ms": 0}, key)
    s.line(original)
    return "error" in refused and s.count(other) == 0


def error_record_survives_conflict(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.raw("sep3182_throw", {"label": label, "payload": "a"}, key)
    s.call("sep3182_throw", {"label": label, "payload": "b"}, key)
    again = s.raw("sep3182_throw", {"label": label, "payload": "a"}, key)
    return first == again and s.count(label) == 1


def _conflict_against(tool: str) -> Callable[[Stdio], bool]:
    def probe(s: Stdio) -> bool:
        key, label = fresh("k"), fresh()
        s.call(tool, {"label": label, "payload": "a"}, key)
        other = s.call(tool, {"label": label, "payload": "b"}, key)
        data = (other.get("error") or {}).get("data") or {}
        return data.get("type") == "idempotency_key_conflict" and s.count(label) == 1

    return probe


def meta_ignored(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.call("sep3182_record", {"label": label}, key, _meta={"progressToken": 1})
    again = s.call("sep3182_record", {"label": label}, key, _meta={"progressToken": 2})
    return bool(again.get("result") == first["result"])


def _keys_distinct(make: Callable[[str], tuple[str, str]]) -> Callable[[Stdio], bool]:
    def probe(s: Stdio) -> bool:
        one, two = make(fresh("Key"))
        label = fresh()
        s.call("sep3182_record", {"label": label}, one)
        s.call("sep3182_record", {"label": label}, two)
        return s.count(label) == 2

    return probe


def replay_type_strict(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.raw("sep3182_record", {"label": label}, key)
    again = s.raw("sep3182_record", {"label": label}, key)
    return _type_strict(json.loads(first), json.loads(again))


def replay_raw_identical(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.raw("sep3182_fail", {"label": label}, key)
    again = s.raw("sep3182_fail", {"label": label}, key)
    return first == again


def replay_meta_identical(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = json.loads(s.raw("sep3182_record", {"label": label}, key))
    again = json.loads(s.raw("sep3182_record", {"label": label}, key))
    return bool(first.get("_meta") == again.get("_meta"))


def _codes(s: Stdio) -> list[int]:
    key, label = fresh("k"), fresh()
    s.call("sep3182_record", {"label": label, "payload": 1}, key)
    conflict = s.call("sep3182_record", {"label": label, "payload": 2}, key)
    slow_key, args = fresh("k"), {"label": fresh(), "ms": 300}
    original = s.send("tools/call", _params("sep3182_record_slow", args, slow_key, {}))
    in_progress = s.call("sep3182_record_slow", args, slow_key)
    s.line(original)
    return [conflict["error"]["code"], in_progress["error"]["code"]]


def no_reserved_code(s: Stdio) -> bool:
    return not any(-32099 <= c <= -32020 for c in _codes(s))


def no_legacy_code(s: Stdio) -> bool:
    return not any(-32019 <= c <= -32000 for c in _codes(s))


def _conflict_pair(one: Any, two: Any) -> Callable[[Stdio], bool]:
    """Payloads `one` then `two` under one key: refused as a conflict, one execution."""

    def probe(s: Stdio) -> bool:
        key, label = fresh("k"), fresh()
        s.call("sep3182_record", {"label": label, "payload": one}, key)
        other = s.call("sep3182_record", {"label": label, "payload": two}, key)
        return "error" in other and s.count(label) == 1

    return probe


def record_survives_conflict(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.call("sep3182_record", {"label": label, "payload": "a"}, key)
    s.call("sep3182_record", {"label": label, "payload": "b"}, key)
    again = s.call("sep3182_record", {"label": label, "payload": "a"}, key)
    return again.get("result") == first.get("result") and s.count(label) == 1


def one_execution_together(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    params = _params("sep3182_record", {"label": label}, key, {})
    ids = [s.send("tools/call", params), s.send("tools/call", params)]
    for rid in ids:
        s.line(rid)
    return s.count(label) == 1


def large_replayed(size: int) -> Callable[[Stdio], bool]:
    def probe(s: Stdio) -> bool:
        key, label = fresh("k"), fresh()
        first = s.call("sep3182_record", {"label": label, "pad": size}, key)
        again = s.call("sep3182_record", {"label": label, "pad": size}, key)
        return again.get("result") == first.get("result") and s.count(label) == 1

    return probe


def kept_past_other_keys(s: Stdio) -> bool:
    key, label = fresh("k"), fresh()
    first = s.call("sep3182_record", {"label": label}, key)
    for _ in range(101):
        s.call("sep3182_record", {"label": fresh()}, fresh("k"))
    again = s.call("sep3182_record", {"label": label}, key)
    return again.get("result") == first.get("result") and s.count(label) == 1


PROBES: dict[str, Callable[[Stdio], bool]] = {
    "args-top-level-only": _conflict_pair({"a": {"b": 1}}, {"a": {"b": 2}}),
    "args-nested-keys-dropped": _conflict_pair({"a": {"b": 1}}, {"a": {"c": 1}}),
    "args-lists-sorted": _conflict_pair([1, 2], [2, 1]),
    "args-lists-deduped": _conflict_pair([1, 2], [1, 2, 2]),
    "args-str-leaves": _conflict_pair("1", 1),
    "args-python-equality": _conflict_pair(True, 1),
    "args-null-dropped": _conflict_pair({"s": None}, {}),
    "args-strings-folded": _conflict_pair("Alpha", "alpha"),
    "args-empty-equal": _conflict_pair("", None),
    "conflict-overwrites": record_survives_conflict,
    "conflict-deletes": record_survives_conflict,
    "race-check-then-set": one_execution_together,
    "key-truncated": _keys_distinct(lambda k: (k.ljust(254, "x") + "a", k.ljust(254, "x") + "b")),
    "large-not-recorded": large_replayed(64 * 1024),
    "large-truncated": large_replayed(64 * 1024),
    "huge-reexecuted": large_replayed(1024 * 1024),
    "huge-error-unrecorded": large_replayed(1024 * 1024),
    "in-progress-lease-expires": one_execution_late_in_a_run,
    "in-progress-conflict-executes": other_arguments_run_nothing_while_running,
    "conflict-clears-error-record": error_record_survives_conflict,
    "retention-lru-100": kept_past_other_keys,
    "throw-reexecuted": throw_replayed,
    "in-progress-corrupts": original_replayed_after_in_progress,
    "error-record-any-args": _conflict_against("sep3182_fail"),
    "jsonrpc-error-record-any-args": _conflict_against("sep3182_throw"),
    "meta-compared": meta_ignored,
    "key-casefold": _keys_distinct(lambda k: (k, k.lower())),
    "key-trimmed": _keys_distinct(lambda k: (k, k + " ")),
    "key-nfc": _keys_distinct(
        lambda k: (
            unicodedata.normalize("NFC", k + "\u00e9"),
            unicodedata.normalize("NFD", k + "\u00e9"),
        )
    ),
    "replay-number-type": replay_type_strict,
    "replay-bool-type": replay_type_strict,
    "replay-reserialised": replay_raw_identical,
    "replay-meta-timestamp": replay_meta_identical,
    "reserved-code": no_reserved_code,
    "legacy-code": no_legacy_code,
}


def test_every_probe_is_of_a_mutant_in_the_catalogue() -> None:
    assert set(PROBES) <= {m.name for m in catalogue.MUTANTS}


@pytest.fixture(scope="module")
def reference() -> Iterator[Stdio]:
    with stdio() as server:
        yield server


@pytest.mark.parametrize("mutant", sorted(PROBES))
def test_blind_spot_mutant_misbehaves_where_the_reference_does_not(
    reference: Stdio, mutant: str
) -> None:
    probe = PROBES[mutant]
    assert probe(reference), f"the reference fails the probe for {mutant}"
    with stdio("--mutant", mutant) as broken:
        assert not probe(broken), f"mutant {mutant} behaves like the reference"


def _http_call(client: httpx.Client, url: str, era: str, params: dict[str, Any]) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    if era == catalogue.MODERN:
        params = {**params, "_meta": MODERN_META}
    message["params"] = params
    return client.post(url, json=message).json()


def _new_connection(url: str, era: str) -> httpx.Client:
    client = httpx.Client(headers={"Authorization": "Bearer alice"}, timeout=10)
    if era == catalogue.LEGACY:
        init = {
            "protocolVersion": era,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        reply = client.post(
            url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
        )
        client.headers["Mcp-Session-Id"] = reply.headers["mcp-session-id"]
    return client


@pytest.mark.parametrize("era", catalogue.BOTH)
@pytest.mark.parametrize("mutant", [None, "scope-per-connection"])
def test_scope_across_connections_over_http(tmp_path: Any, era: str, mutant: str | None) -> None:
    """Same credentials, a new connection (2025-11-25: a new session): the reference replays,
    the per-connection mutant runs the tool again."""
    args = ["--mutant", mutant] if mutant else []
    with tempfile.TemporaryFile() as log, _http_instance(free_port(), args, log) as url:
        key, label = fresh("k"), fresh()
        call = {"name": "sep3182_record", "arguments": {"label": label}, "idempotencyKey": key}
        with contextlib.closing(_new_connection(url, era)) as one:
            first = _http_call(one, url, era, call)
        with contextlib.closing(_new_connection(url, era)) as two:
            again = _http_call(two, url, era, call)
    assert first["result"]["structuredContent"]["executions"] == 1
    replayed = again.get("result") == first["result"]
    assert replayed is (mutant is None), again


# -- the reference's equivalence is the SEP's ------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _canon(text: str) -> str:
    return canonical(parse_exact(text))


@given(json_values)
def test_serialisation_details_never_matter(value: Any) -> None:
    """Key order, whitespace, escapes: one canonical text (SEP, Request equivalence)."""
    plain = json.dumps(value)
    assert _canon(plain) == _canon(json.dumps(value, indent=2, sort_keys=True))
    assert _canon(plain) == _canon(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


@given(st.integers(min_value=-(10**30), max_value=10**30), st.integers(min_value=0, max_value=5))
def test_numbers_compare_by_value(n: int, zeros: int) -> None:
    spellings = [str(n), f"{n}.{'0' * (zeros + 1)}", f"{n}e0", f"{n * 10}e-1"]
    assert len({_canon(s) for s in spellings}) == 1
    assert _canon(str(n)) != _canon(str(n + 1))


@given(json_values, json_values)
def test_different_values_stay_different(a: Any, b: Any) -> None:
    same = _type_blind_equal(a, b)
    assert (_canon(json.dumps(a)) == _canon(json.dumps(b))) is same


def _type_blind_equal(a: Any, b: Any) -> bool:
    """The SEP's equality: numbers by value (never equal to booleans), strings as parsed."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return Fraction(json.dumps(a)) == Fraction(json.dumps(b))  # the values as written
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_type_blind_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_type_blind_equal, a, b))
    return type(a) is type(b) and bool(a == b)


def test_no_unicode_normalisation() -> None:
    nfc, nfd = unicodedata.normalize("NFC", "caf\u00e9"), unicodedata.normalize("NFD", "caf\u00e9")
    assert _canon(json.dumps(nfc)) != _canon(json.dumps(nfd))
    assert canonical(nfc, nfc=True) == canonical(nfd, nfc=True)  # what the mutant does


@given(json_values, json_values)
def test_raw_member_is_the_members_text_as_written(a: Any, b: Any) -> None:
    inner = json.dumps(b, indent=1)
    text = '{ "x" : ' + json.dumps(a) + ' ,\n "arguments":' + inner + " }"
    assert raw_member(text, ("arguments",)) == inner
    assert raw_member('{"params": ' + text + "}", ("params", "arguments")) == inner
    assert raw_member(text, ("missing",)) is None


def test_key_order_mutant_keeps_member_order() -> None:
    one = json.loads('{"a": 1, "b": 2}', object_pairs_hook=Pairs)
    two = json.loads('{"b": 2, "a": 1}', object_pairs_hook=Pairs)
    assert canonical(one) == canonical(two)
    assert canonical(one, ordered=True) != canonical(two, ordered=True)
