"""A property of the HTTP proxy's ingress: whatever the bytes, the JSON around a keyed call and
the `Content-Encoding` header (gzip, deflate, br, identity, garbage, stacked, or lying), a keyed
`tools/call` either goes through the engine or is refused by the proxy; it never reaches the
upstream unchecked. The upstream reads bodies leniently (it inflates gzip and deflate itself
and decodes UTF-8 with replacement), and counts executions."""

from __future__ import annotations

import gzip
import json
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from idemtools.proxy.config import ProxyConfig
from tests.budget import examples

from .edge import EchoUpstream, echo_upstream, serving
from .test_http_edge import post

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
CODINGS = ["gzip", "deflate", "br", "identity", "zstd", "x-gzip", "GZIP", "garbage"]
PLACEHOLDER = "L" * 32  # the label's place: each example gets a fresh label of this length


def _keyed(label: str, key: str, rid: Any, extra: dict[str, Any]) -> dict[str, Any]:
    params = {**extra, "name": "record", "arguments": {"label": label}, "idempotencyKey": key}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A keyed call to `record {PLACEHOLDER}`, alone or among other JSON, as bytes (maybe
    mutated)."""
    key = draw(st.text(min_size=1, max_size=12))
    rid = draw(st.one_of(st.integers(), st.text(max_size=6)))
    extra = draw(st.dictionaries(st.sampled_from(["_meta", "task", "x"]), JSON, max_size=2))
    message: Any = _keyed(PLACEHOLDER, key, rid, extra)
    shape = draw(st.sampled_from(["alone", "batch", "twice"]))
    if shape == "batch":
        around = draw(st.lists(JSON, max_size=3))
        at = draw(st.integers(0, len(around)))
        message = [*around[:at], message, *around[at:]]
    elif shape == "twice":
        message = [message, {**message, "id": f"{rid}-again"}]
    data = json.dumps(message, ensure_ascii=draw(st.booleans())).encode()
    mutation = draw(st.sampled_from(["none", "none", "insert", "truncate", "replace"]))
    if mutation == "insert":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    elif mutation == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif mutation == "replace":
        data = draw(st.binary(max_size=64))
    return data


def _encode(data: bytes, coding: str) -> bytes:
    if coding.lower() in ("gzip", "x-gzip"):
        return gzip.compress(data)
    if coding.lower() == "deflate":
        return zlib.compress(data)
    return data  # identity, or a coding the header claims and the body does not have


@pytest.fixture(scope="module")
def front() -> Iterator[tuple[str, EchoUpstream]]:
    with (
        echo_upstream() as up,
        serving(up.url, ProxyConfig().with_overrides(scope="token-hash")) as (url, _),
    ):
        yield url, up


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_keyed_call_never_reaches_the_upstream_unchecked(
    front: tuple[str, EchoUpstream], data: st.DataObject
) -> None:
    url, up = front
    label = uuid.uuid4().hex
    body = data.draw(bodies()).replace(PLACEHOLDER.encode(), label.encode())
    codings = data.draw(st.lists(st.sampled_from(CODINGS), max_size=3))
    lie = data.draw(st.booleans())  # the header names codings the body does not have
    if not lie:
        for coding in codings:
            body = _encode(body, coding)
    headers = {"content-encoding": ",".join(codings)} if codings else {}
    before = len(up.seen)
    for _ in range(2):  # a retry of the same bytes
        answer = post(url, body, "t", **headers)
        assert answer.status_code in (200, 202, 400, 413, 415), answer.text
    for seen in up.seen[before:]:
        assert seen.header("content-encoding") is None  # only what the proxy read goes on
    for _, message in up.calls():
        params = message.get("params")
        assert not (isinstance(params, dict) and "idempotencyKey" in params), message
    assert up.executions(label) <= 1
