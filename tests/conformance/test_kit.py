"""The kit's own parts: JSON text it sends, what it reads back, the baseline, exit codes, CLI."""

from __future__ import annotations

import argparse
import ast
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import idemtools.conformance as conformance
from idemtools.conformance import contract
from idemtools.conformance.catalogue import CHECKS, SCENARIOS
from idemtools.conformance.checks import Context, Reply, record
from idemtools.conformance.cli import _header
from idemtools.conformance.jsonvalues import raw_members, raw_without, strict_equal
from idemtools.conformance.report import (
    LEVELS,
    STATUSES,
    Baseline,
    BaselineError,
    Report,
    Result,
)
from idemtools.conformance.wire import Raw, _sse_reply, encode
from tests.budget import examples

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
    assert all(c.startswith(("sep-3182-", "mcp-base-")) for c in CHECKS)
    # The base-spec checks read every error answer of the era: they run last.
    assert SCENARIOS[-1].checks == ("mcp-base-error-codes-reserved", "mcp-base-error-codes-legacy")


def test_every_scenario_has_a_family_the_cli_offers() -> None:
    from idemtools.conformance.families import FAMILIES

    assert {s.family for s in SCENARIOS} == set(FAMILIES)


def test_an_unknown_family_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        run_kit(tmp_path, "--family", "no-such-family", "--", PY, "-c", "pass")
    assert exited.value.code == 2


# -- type-strict JSON equality ------------------------------------------------------------------


@given(json_values)
def test_strict_equal_is_reflexive_and_survives_a_json_round_trip(value: Any) -> None:
    assert strict_equal(value, value)
    assert strict_equal(value, json.loads(json.dumps(value)))


@given(json_values, json_values)
def test_strict_equal_implies_python_equality_and_is_symmetric(a: Any, b: Any) -> None:
    assert strict_equal(a, b) == strict_equal(b, a)
    if strict_equal(a, b):
        assert a == b


def _retype(value: Any) -> Any:
    """The same number (or truth) as another JSON type, where there is one."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and abs(value) < 2**53:
        return float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return None


@given(json_values, st.data())
def test_a_value_of_another_json_type_is_never_strictly_equal(value: Any, data: Any) -> None:
    """Python says True == 1 == 1.0; a replay that changes a JSON type must not compare equal."""
    paths: list[list[Any]] = []

    def walk(node: Any, path: list[Any]) -> None:
        if _retype(node) is not None:
            paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, [*path, k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, [*path, i])

    walk(value, [])
    if not paths:
        return
    path = data.draw(st.sampled_from(paths))
    changed = json.loads(json.dumps(value))
    if not path:
        changed = _retype(value)
    else:
        node = changed
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _retype(node[path[-1]])
    assert changed == value  # Python cannot tell them apart
    assert not strict_equal(value, changed)


@pytest.mark.parametrize(
    ("a", "b"), [(True, 1), (1, 1.0), (True, 1.0), ({"a": [0]}, {"a": [False]}), (None, 0)]
)
def test_strict_equal_tells_types_apart(a: Any, b: Any) -> None:
    assert a == b or a is None
    assert not strict_equal(a, b)


@given(json_values, json_values)
def test_raw_members_find_each_member_as_written(meta: Any, rest: Any) -> None:
    body = {"content": rest, "_meta": meta, "isError": False}
    for indent in (None, 3):
        text = json.dumps({"jsonrpc": "2.0", "id": 7, "result": body}, indent=indent)
        members = raw_members(text)
        assert members is not None and [m[0] for m in members] == ["jsonrpc", "id", "result"]
        cut = raw_without(text, "result", "_meta")
        assert cut is not None
        assert json.loads(cut) == {"content": rest, "isError": False}
    last = json.dumps({"result": {"content": rest, "_meta": meta}})
    assert json.loads(raw_without(last, "result", "_meta") or "null") == {"content": rest}
    assert raw_without('{"error": {}}', "result", "_meta") is None


def test_baseline_in_the_official_suites_yaml_shape() -> None:
    """`server:` entries: `<scenario>`, `<scenario>:<check-id>`, or a bare check id."""
    scenarios = {s.name: s.checks for s in SCENARIOS}
    text = (
        "# expected failures, as in the official suite\n"
        "server:\n"
        "  - in_progress        # a whole scenario\n"
        "  - conflicts:sep-3182-conflict-tool-name\n"
        "  - 'sep-3182-equivalence-numbers'\n"
        "client:\n"
        "  - auth/basic-dcr\n"
    )
    baseline = Baseline.parse(text, CHECKS, scenarios)
    in_progress = next(s for s in SCENARIOS if s.name == "in_progress").checks
    assert baseline.ids == {"sep-3182-conflict-tool-name", "sep-3182-equivalence-numbers"}
    assert baseline.groups == (("in_progress", frozenset(in_progress)),)
    assert all(baseline.covers(c) for c in in_progress)
    # A whole-scenario entry: any of its checks may fail; it is stale only when none failed.
    one = Result(in_progress[0], "MUST", "fail", "s", "d", "2025-11-25")
    rest = [Result(c, "MUST", "pass", "s", "d", "2025-11-25") for c in in_progress[1:]]
    only = Baseline(groups=baseline.groups)
    assert Report("t", ["e"], [one, *rest], only).exit_code() == 0
    assert Report("t", ["e"], rest, only).stale() == ["in_progress"]
    assert Baseline.parse("server: []\n", CHECKS, scenarios).ids == frozenset()
    with pytest.raises(BaselineError, match="no space after the colon"):
        Baseline.parse("server:\n  - conflicts: sep-3182-conflict-tool-name\n", CHECKS)
    with pytest.raises(BaselineError, match="unknown check id or scenario 'nope'"):
        Baseline.parse("server:\n  - nope\n", CHECKS, scenarios)
    with pytest.raises(BaselineError, match="unknown check id 'sep-3182-nope'"):
        Baseline.parse("server:\n  - x:sep-3182-nope\n", CHECKS, scenarios)
    with pytest.raises(BaselineError, match="unknown section"):
        Baseline.parse("servers:\n  - sep-3182-shared-store\n", CHECKS, scenarios)


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
        level=st.sampled_from(LEVELS),
        status=st.sampled_from(STATUSES),
        section=st.just("s"),
        detail=st.just("d"),
        era=st.sampled_from(["2025-11-25", "2026-07-28"]),
        enable=st.sampled_from([None, "--also URL", "the fixture tools"]),
        blocked_by=st.sampled_from([None, "sep-3182-duplicate-not-executed"]),
    ),
    max_size=12,
)


@settings(max_examples=examples(200), deadline=None)
@given(results, st.frozensets(st.sampled_from(sorted(CHECKS)), max_size=4), st.booleans())
def test_exit_code_is_unexpected_must_failures_stale_baseline_or_required_skips(
    found: list[Result], expected: frozenset[str], require_all: bool
) -> None:
    """The report vocabulary, as a model: what fails, what did not run, what the exit says."""
    report = Report(
        target="t",
        eras=["2025-11-25"],
        results=found,
        baseline=Baseline(expected),
        require_all=require_all,
    )

    def failed(r: Result) -> bool:  # blocked by a failure (or by nothing named) is a failure
        return r.status == "fail" or (
            r.status == "blocked" and (r.blocked_by is not None or r.enable is None)
        )

    failures = {r.id for r in found if failed(r)}
    unexpected = {r.id for r in found if failed(r) and r.level == "MUST"} - expected
    stale = expected - failures

    def did_not_run(r: Result) -> bool:
        return r.status in ("skip", "blocked") and not failed(r) and bool(r.enable)

    not_run = {r.id for r in found if did_not_run(r) and r.level == "MUST"}
    fixture_errors = {r.id for r in found if r.status == "fixture-error"}
    fails = bool(unexpected or stale or (require_all and not_run))
    assert report.exit_code() == (2 if fixture_errors else 1 if fails else 0)
    summary = report.summary()
    assert set(summary["unexpected_failures"]) == unexpected
    assert set(summary["stale_baseline"]) == stale
    assert set(summary["expected_failures"]) == expected & failures
    assert set(summary["skipped_must"]) == not_run
    assert summary["incomplete"] == bool(not_run or fixture_errors)
    counted = ("passed", "failed", "skipped", "blocked", "fixture_errors")
    assert sum(summary[k] for k in counted) == len(found)
    assert summary["noted"] == sum(1 for r in found if r.status == "note")
    by_level = summary["by_level"]
    assert sum(n for row in by_level.values() for n in row.values()) == len(found)
    lines = report.lines()
    assert len(lines) >= len(found) + 2
    # Never "conformant" while a MUST check did not run; always say how many and what runs them.
    clean = not fails and not not_run and not fixture_errors
    assert (lines[-1] == "conformant") == clean
    if not_run:
        assert any(f"{len(not_run)} MUST check" in line for line in lines)
        enablers = {r.enable for r in found if did_not_run(r) and r.level == "MUST"}
        assert all(f"{e}" in lines[-2] for e in enablers) and "None" not in lines[-2]
    assert json.loads(report.render_json())["summary"] == summary


def test_a_blocked_must_fails_the_run_and_names_what_blocked_it() -> None:
    blocked = Result(
        "sep-3182-conflict-jsonrpc-error-record",
        "MUST",
        "blocked",
        "s",
        "sep3182_throw did not answer",
        "2025-11-25",
        blocked_by="sep-3182-error-replayed-jsonrpc",
    )
    info = Result("sep-3182-replay-raw-identical", "INFO", "fail", "s", "differs", "2025-11-25")
    report = Report("t", ["2025-11-25"], [info])
    assert report.exit_code() == 0 and report.lines()[-1] == "conformant"
    report.results.append(blocked)
    assert report.exit_code() == 1
    assert any("blocked by sep-3182-error-replayed-jsonrpc" in line for line in report.lines())
    check = report.as_json()["checks"][1]
    assert check["status"] == "blocked"
    assert check["blocked_by"] == "sep-3182-error-replayed-jsonrpc"
    assert report.summary()["blocked"] == 1


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


def test_server_without_fixtures_is_judged_on_what_needs_none(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    kit = run_kit(
        tmp_path, "--era", "2025-11-25", "--", PY, str(root / "examples/payments_server.py")
    )
    assert kit.code == 0, kit.out + kit.err
    assert kit.check("sep-3182-capability-initialize")["status"] == "pass"
    assert kit.check("sep-3182-duplicate-not-executed")["status"] == "blocked"
    assert kit.report["summary"]["incomplete"] is True
    assert "the target lists no fixture tools" in kit.out


def test_bad_baseline_exits_2(tmp_path: Path) -> None:
    baseline = tmp_path / "b.txt"
    baseline.write_text("not-a-check\n")
    kit = run_kit(tmp_path, "--baseline", str(baseline), "http://127.0.0.1:9/mcp")
    assert kit.code == 2 and "unknown check id" in kit.err


def test_also_needs_http(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--also", "http://127.0.0.1:9/mcp", "--", PY, "-V")
    assert kit.code == 2 and "--also needs an HTTP TARGET" in kit.err


KIT_MODULES = [
    "__init__",
    "checks",
    "cli",
    "contract",
    "defaults",
    "jsonvalues",
    "probe",
    "report",
    "runner",
    "scenario",
    "sentences",
    "unfixtured",
    "wire",
    *(f"sep/{p.stem}" for p in sorted((Path(conformance.__file__).parent / "sep").glob("*.py"))),
]
FORBIDDEN = (
    "idemtools.engine",
    "idemtools.stores",
    "idemtools.server.adapters",
    "idemtools.server.installation",
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
    from idemtools.conformance.sep import arguments

    for scenario in (
        "equivalence_numbers",
        "equivalence_escapes",
        "equivalence_whitespace",
        "equivalence_key_order",
    ):
        source = ast.parse(Path(arguments.__file__).read_text())
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


def test_one_bug_one_failure_the_rest_are_blocked_by_it() -> None:
    """Within a scenario the same failure is reported once; a dead connection once per era."""
    report = Report("t", ["2025-11-25"])
    ctx = Context(era="2025-11-25", wire=None, run_id="r")  # type: ignore[arg-type]
    same: Any = ("fail", "the first keyed call did not answer: {}")
    a = record(report, ctx, "sep-3182-conflict-rejected", same)
    b = record(report, ctx, "sep-3182-conflict-not-executed", same)
    dead: Any = ("fail", "wire failure: the server process ended")
    c = record(report, ctx, "sep-3182-equivalence-numbers", dead)
    ctx.causes = {}  # the next scenario
    d = record(report, ctx, "sep-3182-no-unicode-normalization", dead)
    e = record(report, ctx, "sep-3182-key-case-sensitive", same)
    explicit: Any = ("fail", "x", {"blocked_by": "sep-3182-in-progress-not-blocked"})
    f = record(report, ctx, "sep-3182-in-progress-error-data", explicit)
    assert (a.status, b.status, b.blocked_by) == ("fail", "blocked", a.id)
    assert (c.status, d.status, d.blocked_by) == ("fail", "blocked", c.id)
    assert e.status == "fail"  # the same words in another scenario: its own failure
    assert (f.status, f.blocked_by) == ("blocked", "sep-3182-in-progress-not-blocked")
    assert b.text == CHECKS[b.id].text and b.url.endswith("/pull/3182")
    assert report.exit_code() == 1 and report.summary()["blocked"] == 3


def test_when_every_keyed_retry_runs_again_the_dependants_are_blocked_by_that() -> None:
    report = Report("t", ["2026-07-28"])
    ctx = Context(era="2026-07-28", wire=None, run_id="r")  # type: ignore[arg-type]
    independent = record(report, ctx, "sep-3182-capability-discover", ("fail", "missing"))
    dup = record(report, ctx, "sep-3182-duplicate-not-executed", ("fail", "2 executions"))
    ctx.causes = {}
    passed = record(report, ctx, "sep-3182-conflict-no-cached-result", ("pass", "ok"))
    dependant = record(report, ctx, "sep-3182-error-replayed-jsonrpc", ("fail", "2 executions."))
    codes = record(report, ctx, "mcp-base-error-codes-reserved", ("fail", "-32052"))
    assert (independent.status, dup.status, passed.status, codes.status) == ("fail",) * 2 + (
        "pass",
        "fail",
    )
    assert (dependant.status, dependant.blocked_by) == ("blocked", dup.id)
    assert dependant.detail == "2 executions."  # what it saw, still reported
    assert CHECKS["sep-3182-capability-discover"].after is None
    assert all(
        c.after == "sep-3182-duplicate-not-executed"
        for c in CHECKS.values()
        if c.id.startswith("sep-3182-key-") or c.id.startswith("sep-3182-equivalence-")
    )


async def test_base_error_codes_judge_every_error_answer_by_range() -> None:
    from idemtools.conformance.checks import base_error_codes

    ctx = Context(era="2026-07-28", wire=None, run_id="r")  # type: ignore[arg-type]
    conflict = {"type": "idempotency_key_conflict"}
    ctx.errors = [
        ({"code": -32052, "message": "conflict", "data": conflict}, '{"name": "sep3182_record"}'),
        ({"code": -32020, "message": "HeaderMismatch"}, "{}"),  # defined by the spec
        ({"code": -32042, "message": "URL elicitation"}, "{}"),  # 2025-11-25 only: undefined
        ({"code": -32001, "message": "legacy"}, "{}"),
        ({"code": -32800, "message": "Request cancelled"}, "{}"),  # the SDK's own: neither
        ({"code": 1001, "message": "thrown"}, "{}"),
    ]
    out = await base_error_codes(ctx)
    reserved, legacy = out["mcp-base-error-codes-reserved"], out["mcp-base-error-codes-legacy"]
    assert reserved[0] == "fail" and legacy[0] == "fail"
    assert (
        "-32052 ('conflict', data.type idempotency_key_conflict, answering sep3182_record)"
        in (reserved[1])
    )
    assert (
        "-32042 (" in reserved[1] and "-32020 (" not in reserved[1] and "-32001" not in reserved[1]
    )
    assert "-32001" in legacy[1] and "-32800" not in legacy[1] + reserved[1]
    ctx.errors = ctx.errors[-2:]
    out = await base_error_codes(ctx)
    assert out["mcp-base-error-codes-reserved"][0] == "pass"
    assert out["mcp-base-error-codes-legacy"][0] == "pass"
