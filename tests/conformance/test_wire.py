"""The kit's wire against what a hostile target can send, chunked at any byte: stdio lines (and
lines over the cap), SSE events, and the noise it counts instead of answers."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from idemtools.cli import main as cli_main
from idemtools.conformance.runner import DEFAULT_DEADLINE, Options
from idemtools.conformance.wire import RAW_TEXT, Noise, StdioWire, WireError, _SseEvents
from tests.budget import examples

pytestmark = pytest.mark.sdk_free

CAP = 1024


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True) if b > a]


# One line each: ("answer", id, padding) answers a waiting request; ("big", id, padding) is an
# answer over the cap; ("garbage",) is not JSON; ("ping", n) is a request of the server's own.
lines = st.lists(
    st.one_of(
        st.tuples(st.just("answer"), st.integers(1, 30), st.integers(0, CAP // 2)),
        st.tuples(st.just("big"), st.integers(31, 60), st.integers(CAP, 3 * CAP)),
        st.tuples(st.just("garbage")),
        st.tuples(st.just("ping"), st.integers(0, 10**6)),
    ),
    max_size=12,
)


def render(line: tuple[Any, ...]) -> bytes:
    if line[0] in ("answer", "big"):
        body = {"jsonrpc": "2.0", "id": line[1], "result": {"pad": "x" * line[2]}}
    elif line[0] == "garbage":
        return b"\x00not json {"
    else:
        body = {"jsonrpc": "2.0", "id": f"s{line[1]}", "method": "ping"}
    return json.dumps(body).encode()


@settings(max_examples=examples(60), deadline=None)
@given(lines, st.lists(st.integers(0, 10**6), max_size=20))
@example([("big", 31, CAP), ("big", 31, CAP), ("answer", 1, 0)], [])  # a late one: no harm
@example([("big", 31, 2 * CAP)], [7, CAP + 3])
def test_stdio_lines_survive_any_chunking(script: list[tuple[Any, ...]], cuts: list[int]) -> None:
    async def go() -> None:
        wire = StdioWire(["unused"], "2025-11-25", 1.0, max_message=CAP)
        loop = asyncio.get_running_loop()
        futures = {}
        for line in script:  # the first line with each id is the one the kit waits for
            if line[0] in ("answer", "big") and line[1] not in futures:
                futures[line[1]] = wire._pending[line[1]] = loop.create_future()
        data = b"".join(render(line) + b"\n" for line in script)
        reader = asyncio.StreamReader()
        for chunk in chunked(data, cuts):
            reader.feed_data(chunk)
        reader.feed_eof()
        await wire._read_lines(reader)
        first: dict[int, str] = {}
        for line in script:
            if line[0] in ("answer", "big"):
                first.setdefault(line[1], line[0])
        for rid, kind in first.items():
            future = futures[rid]
            assert future.done()
            if kind == "answer":
                answer = future.result()
                assert answer["id"] == rid and json.loads(answer[RAW_TEXT]) == {
                    k: v for k, v in answer.items() if k != RAW_TEXT
                }
            else:
                error = future.exception()
                assert isinstance(error, WireError) and "over the 1024-byte cap" in str(error)
        kinds = [line[0] for line in script]
        assert wire.noise.garbage == kinds.count("garbage")
        assert wire.noise.requests == kinds.count("ping")
        assert wire.noise.oversized == kinds.count("big")
        assert wire.noise.answered + wire.noise.ignored == kinds.count("ping")
        assert wire._outbox.qsize() <= wire._outbox.maxsize

    asyncio.run(go())


events = st.lists(
    st.dictionaries(st.sampled_from(["id", "x", "method"]), st.integers(0, 9), max_size=3),
    max_size=6,
)


@given(events, st.lists(st.integers(0, 10**5), max_size=20), st.sampled_from(["\n", "\r\n"]))
def test_sse_events_survive_any_chunking(
    found: list[dict[str, Any]], cuts: list[int], eol: str
) -> None:
    text = "".join(
        f": comment{eol}event: message{eol}data: {json.dumps(e)}{eol}{eol}" for e in found
    ).encode()
    parser = _SseEvents()
    out: list[bytes] = []
    for chunk in chunked(text, cuts):
        out.extend(parser.feed(chunk))
    out.extend(parser.close())
    assert [json.loads(d) for d in out] == found


def test_noise_names_only_what_arrived_meanwhile() -> None:
    noise = Noise()
    noise.saw_garbage(b"hello")
    before = noise.snapshot()
    assert noise.since(before) == ""
    for _ in range(1500):
        noise.saw_request("ping")
        noise.ignored += 1
    noise.saw_wrong_id(99)
    said = noise.since(before)
    assert (
        "a flood of 1500 requests of its own (ping x1500; the kit answered 0, ignored 1500)" in said
    )
    assert "1 answers with ids the kit never sent (first: '99')" in said
    assert "not JSON" not in said


def test_the_default_deadline_leaves_room_for_the_waits_a_run_makes() -> None:
    assert Options(target="http://x").run_deadline() == DEFAULT_DEADLINE
    assert Options(target="http://x", retention=100).run_deadline() == DEFAULT_DEADLINE + 100
    one = Options(target="http://x", retention=100, eras=("2025-11-25",))
    assert one.run_deadline() == DEFAULT_DEADLINE + 50
    assert Options(target="http://x", retention=100, deadline=7).run_deadline() == 7


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--deadline", "0"], "expected a number of seconds > 0"),
        (["--timeout", "-1"], "expected a number of seconds > 0"),
        (["--deadline", "nan"], "expected a number of seconds > 0"),
        (["--max-message-bytes", "100"], "--max-message-bytes must be at least 1024"),
    ],
)
def test_bounds_that_cannot_work_are_usage_errors(args: list[str], message: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli_main(["conformance", *args, "http://127.0.0.1:9/mcp"])
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code  # type: ignore[assignment]
    assert code == 2 and message in err.getvalue()


# A stdio server that answers each request with the number of requests in the read it arrived in.
_CHUNK_COUNTER = r"""
import json, os, sys
buffer = b""
while True:
    data = os.read(0, 1 << 20)
    if not data:
        break
    buffer += data
    *complete, buffer = buffer.split(b"\n")
    messages = [json.loads(line) for line in complete if line.strip()]
    for message in messages:
        if "id" in message:
            answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"together": len(messages)}}
            sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"""


def test_requests_together_reach_a_stdio_server_in_one_write() -> None:
    """Two keyed calls "at the same instant" over stdio: one write holds both, so the server
    reads them in one chunk and a check-then-set race has its best chance."""
    import sys

    async def go() -> list[dict[str, Any]]:
        wire = StdioWire([sys.executable, "-c", _CHUNK_COUNTER], "2025-11-25", 10.0)
        await wire.start()
        try:
            return await wire.requests_together("tools/call", [{"n": 1}, {"n": 2}, {"n": 3}])
        finally:
            await wire.aclose()

    answers = asyncio.run(go())
    assert [a["result"]["together"] for a in answers] == [3, 3, 3]
    assert [a["id"] for a in answers] == sorted(a["id"] for a in answers)  # in the order sent
