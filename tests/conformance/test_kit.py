"""The kit's own parts: JSON text it sends, what it reads back, the baseline, exit codes, CLI."""

from __future__ import annotations

import argparse
import ast
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import idemtools.conformance as conformance
from idemtools.conformance import contract
from idemtools.conformance.checks import CHECKS, SCENARIOS, Reply
from idemtools.conformance.cli import _header
from idemtools.conformance.report import Baseline, BaselineError, Report, Result
from idemtools.conformance.wire import Raw, _sse_reply, encode

from .kit import PY, free_port, run_kit

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_encode_is_json(value: Any) -> None:
    assert json.loads(encode(value)) == value


@given(json_values, json_values)
def test_raw_text_is_inserted_verbatim(outer: Any, inner: Any) -> None:
    text = json.dumps(inner, indent=3)  # a spelling the kit did not choose
    encoded = encode({"a": outer, "raw": Raw(text)})
    assert text in encoded
    assert json.loads(encoded) == {"a": outer, "raw": inner}


@given(st.text(), st.integers(min_value=0, max_value=10**12))
def test_executions_are_read_from_any_fixture_answer(label: str, n: int) -> None:
    text = contract.answer_text(label, n)
    assert contract.executions_of({"content": [{"type": "text", "text": text}]}) == n
    wrapped = {"content": [{"type": "text", "text": f"Error executing tool x: {text}"}]}
    assert contract.executions_of(wrapped) == n
    assert contract.executions_of({"structuredContent": {"executions": n}, "content": []}) == n


@pytest.mark.parametrize(
    "result",
    [
        None,
        [],
        {},
        {"content": "x"},
        {"content": [{"type": "text", "text": "no count"}]},
        {"content": [{"type": "text", "text": '{"executions": true}'}]},
    ],
)
def test_no_count_is_none_not_a_guess(result: Any) -> None:
    assert contract.executions_of(result) is None


def test_replies_compare_results_without_meta() -> None:
    base = {"content": [{"type": "text", "text": "x"}], "isError": False}
    one = Reply({"result": base}, 0.0)
    marked = Reply({"result": {**base, "_meta": {"replayed": True}}}, 0.0)
    other = Reply({"result": {**base, "isError": True}}, 0.0)
    error = Reply({"error": {"code": -1, "message": "m", "data": {"type": "t"}}}, 0.0)
    assert one.same_result(marked) and not one.same_result(other)
    assert not error.same_result(error) and error.rejected and other.rejected
    assert error.error_data() == {"type": "t"} and one.error_data() is None


def test_sse_answer_is_the_event_with_our_id() -> None:
    text = (
        'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
        'data: {"jsonrpc":"2.0","id":6,"result":{}}\n\n'
        'data: {"jsonrpc":"2.0",\ndata: "id":7,"result":{"ok":1}}\n\n'
    )
    assert _sse_reply(text, 7) == {"jsonrpc": "2.0", "id": 7, "result": {"ok": 1}}
    assert _sse_reply(text, 8) is None


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("Authorization: Bearer a:b", ("Authorization", "Bearer a:b")),
        ("X-Api-Key:k", ("X-Api-Key", "k")),
    ],
)
def test_header_option(text: str, parsed: tuple[str, str]) -> None:
    assert _header(text) == parsed


@pytest.mark.parametrize("text", ["no colon", ": v", "Two Words: v"])
def test_bad_header_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _header(text)


def test_every_scenario_decides_known_checks_once() -> None:
    decided = [c for s in SCENARIOS for c in s.checks]
    assert sorted(decided) == sorted(CHECKS)
    assert all(c.startswith("sep-3182-") for c in CHECKS)


def test_baseline_file_grammar() -> None:
    text = "# adopted 2026\n\nsep-3182-equivalence-numbers   # later\n sep-3182-shared-store\n"
    assert Baseline.parse(text, CHECKS).ids == {
        "sep-3182-equivalence-numbers",
        "sep-3182-shared-store",
    }
    with pytest.raises(BaselineError, match="line 2: unknown check id 'sep-3182-nope'"):
        Baseline.parse("sep-3182-shared-store\nsep-3182-nope\n", CHECKS)


results = st.lists(
    st.builds(
        Result,
        id=st.sampled_from(sorted(CHECKS)),
        level=st.sampled_from(["MUST", "SHOULD", "MAY"]),
        status=st.sampled_from(["pass", "fail", "skip"]),
        section=st.just("s"),
        detail=st.just("d"),
        era=st.sampled_from(["2025-11-25", "2026-07-28"]),
    ),
    max_size=12,
)


@given(results, st.frozensets(st.sampled_from(sorted(CHECKS)), max_size=4))
def test_exit_code_is_unexpected_must_failures_or_stale_baseline(
    found: list[Result], expected: frozenset[str]
) -> None:
    report = Report(target="t", eras=["2025-11-25"], results=found, baseline=Baseline(expected))
    failed = {r.id for r in found if r.status == "fail"}
    unexpected = {r.id for r in found if r.status == "fail" and r.level == "MUST"} - expected
    stale = expected - failed
    assert report.exit_code() == (1 if unexpected or stale else 0)
    summary = report.summary()
    assert set(summary["unexpected_failures"]) == unexpected
    assert set(summary["stale_baseline"]) == stale
    assert set(summary["expected_failures"]) == expected & failed
    assert summary["passed"] + summary["failed"] + summary["skipped"] == len(found)
    assert len(report.lines()) >= len(found) + 2
    assert json.loads(report.render_json())["summary"] == summary


def test_unreachable_url_exits_2(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, f"http://127.0.0.1:{free_port()}/mcp")
    assert kit.code == 2 and kit.report == {}
    assert "cannot reach" in kit.err


def test_missing_command_exits_2(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", str(tmp_path / "no-such-server"))
    assert kit.code == 2 and "cannot start" in kit.err


def test_server_that_dies_exits_2(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", PY, "-c", "import sys; print('boom', file=sys.stderr)")
    assert kit.code == 2 and "boom" in kit.err


def test_server_without_fixtures_exits_2(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    kit = run_kit(
        tmp_path, "--era", "2025-11-25", "--", PY, str(root / "examples/payments_server.py")
    )
    assert kit.code == 2
    assert "lacks the conformance fixture tools sep3182_record" in kit.err


def test_bad_baseline_exits_2(tmp_path: Path) -> None:
    baseline = tmp_path / "b.txt"
    baseline.write_text("not-a-check\n")
    kit = run_kit(tmp_path, "--baseline", str(baseline), "http://127.0.0.1:9/mcp")
    assert kit.code == 2 and "unknown check id" in kit.err


def test_also_needs_http(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--also", "http://127.0.0.1:9/mcp", "--", PY, "-V")
    assert kit.code == 2 and "--also needs an HTTP TARGET" in kit.err


KIT_MODULES = ["__init__", "checks", "cli", "contract", "report", "runner", "wire"]
FORBIDDEN = (
    "idemtools.engine",
    "idemtools.stores",
    "idemtools.adapters",
    "idemtools.installation",
    "idemtools.policy",
    "idemtools.scopes",
    "idemtools.canonical",
    "mcp",
    "mcp_types",
)


@pytest.mark.parametrize("module", KIT_MODULES)
def test_the_kit_is_a_black_box(module: str) -> None:
    """architecture.md: the kit imports nothing of the engine, the stores or the adapters (nor
    the SDK) — only the fixture contract and the wire. `_server_fixtures` is the server side."""
    path = Path(conformance.__file__).parent / f"{module}.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names = [f"idemtools.conformance.{node.module or ''}"]
                if node.level > 1:
                    names = [f"idemtools.{node.module or ''}"]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            if name == "idemtools.conformance._server_fixtures" or name.endswith(
                "._server_fixtures"
            ):
                assert module == "__init__"  # the lazy import inside add_fixture_tools
                continue
            assert not name.startswith(FORBIDDEN), f"{module}.py imports {name}"


def test_numbers_in_the_equivalence_texts_are_equal_values() -> None:
    """The kit's own variants must be what it claims: equal parsed values, different texts."""
    from idemtools.conformance import checks

    for scenario in (
        "equivalence_numbers",
        "equivalence_escapes",
        "equivalence_whitespace",
        "equivalence_key_order",
    ):
        source = ast.parse(Path(checks.__file__).read_text())
        func = next(
            n
            for n in ast.walk(source)
            if isinstance(n, ast.AsyncFunctionDef) and n.name == scenario
        )
        texts = [
            c.value
            for c in ast.walk(func)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("{")
        ]
        assert len(texts) >= 2, scenario
        parsed = [json.loads(t) for t in texts]
        assert all(p == parsed[0] for p in parsed), scenario
        assert len(set(texts)) == len(texts), scenario
    one = json.loads('{"n": 1e0}')["n"]
    assert one == 1 and math.isclose(one, 1.0)
