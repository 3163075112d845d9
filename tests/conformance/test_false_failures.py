"""No false failures: what a conforming server may do is never reported as a SEP failure, and
every failure says what was sent, what came back and the sentence it breaks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.conformance.catalogue import CHECKS, SCENARIOS
from idemtools.conformance.contract import RECORD, THROW, answer_text, throw_count
from idemtools.conformance.families.outcomes import HUGE
from idemtools.conformance.probe import probe
from idemtools.conformance.runner import _gate
from tests.budget import examples

from .scripted import Scripted, ScriptedWire, judge

KEYS = ("key_case", "key_whitespace", "key_unicode")
RESTRICTS = "the server restricts keys"


def by_id(report: Any) -> dict[str, Any]:
    return {r.id: r for r in report.results}


async def test_a_server_that_refuses_keys_it_will_not_store_is_skipped_not_failed() -> None:
    report = await judge(Scripted(restrict_keys=True), *KEYS)
    got = by_id(report)
    for check in ("sep-3182-key-whitespace-significant", "sep-3182-key-unicode-exact"):
        assert got[check].status == "skip", got[check]
        assert RESTRICTS in got[check].detail and "idempotency_key_invalid" in got[check].detail
        assert got[check].enable is None  # nothing would run it: never "incomplete"
    assert got["sep-3182-key-case-sensitive"].status == "pass"
    assert report.exit_code() == 0 and report.skipped_must() == []


async def test_a_server_that_merges_distinct_keys_still_fails_and_says_what_it_saw() -> None:
    report = await judge(Scripted(merge_keys=True), *KEYS)
    got = by_id(report)
    for check in ("sep-3182-key-case-sensitive", "sep-3182-key-whitespace-significant"):
        assert got[check].status == "fail", got[check]
        assert "was treated as" not in got[check].detail
        assert "sent key" in got[check].detail and "replayed" in got[check].detail
    assert report.exit_code() == 1
    text = "\n".join(report.lines())
    assert "    sent: " in text and "    got:  " in text
    assert "    rule: " + CHECKS["sep-3182-key-case-sensitive"].text in text


async def test_refused_with_key_invalid_but_run_anyway_is_no_restriction() -> None:
    """A server that says 'invalid' yet executes is judged on what it did."""

    class Liar(Scripted):
        def call(self, params: dict[str, Any]) -> dict[str, Any]:
            answer = super().call(params)
            if (answer.get("error") or {}).get("data", {}).get("type") == "idempotency_key_invalid":
                self.execute(params)  # it ran, then said no
            return answer

    report = await judge(Liar(restrict_keys=True), "key_whitespace")
    assert by_id(report)["sep-3182-key-whitespace-significant"].status == "fail"


DEFAULTS = {"isError": False, "resultType": "complete"}


def _drop(member: str) -> Any:
    return lambda result: {k: v for k, v in result.items() if k != member}


def _add(member: str) -> Any:
    return lambda result: {**result, member: DEFAULTS[member]}


@settings(max_examples=8, deadline=None)
@given(st.sampled_from(sorted(DEFAULTS)), st.sampled_from(["replay", "original"]))
async def test_a_default_member_present_in_one_answer_only_passes_with_a_note(
    member: str, absent_from: str
) -> None:
    """Either direction, either member: the MUST checks pass with a note that names it; the
    strict SHOULD check fails; the run exits 0."""
    if absent_from == "replay":  # the original has it (isError always; resultType added)
        server = Scripted(first_edit=_add(member), replay_edit=_drop(member))
    else:
        server = Scripted(first_edit=_drop(member), replay_edit=_add(member))
    report = await judge(server, "duplicate", "replay_identity")
    got = by_id(report)
    for check in ("sep-3182-duplicate-returns-original", "sep-3182-replay-json-identical"):
        assert got[check].status == "note", got[check]
        assert f"`{member}: " in got[check].detail and "schema default" in got[check].detail
    strict = got["sep-3182-replay-json-equal"]
    assert (strict.status, strict.level) == ("fail", "SHOULD")
    assert member in strict.detail
    assert report.exit_code() == 0
    assert report.summary()["noted"] == 2


@pytest.mark.parametrize(
    ("member", "value"), [("isError", 0), ("isError", True), ("resultType", "incomplete")]
)
async def test_a_member_that_is_not_its_default_is_still_a_must_failure(
    member: str, value: Any
) -> None:
    server = Scripted(replay_edit=lambda result: {**result, member: value})
    report = await judge(server, "duplicate", "replay_identity")
    got = by_id(report)
    assert got["sep-3182-replay-json-identical"].status == "fail"
    assert report.exit_code() == 1


async def test_the_older_throw_field_is_accepted_with_a_note() -> None:
    for name, noted in (("executions", False), ("count", True)):
        wire = ScriptedWire(Scripted(throw_field=name))
        await wire.open()
        found = await probe(wire, "t")
        assert found is not None and not found.broken, found
        assert bool(found.notes) == noted and all("data.count" in n for n in found.notes)
        report = await judge(Scripted(throw_field=name), "jsonrpc_error")
        statuses = {r.id: r.status for r in report.results}
        assert statuses["sep-3182-error-replayed-jsonrpc"] == ("note" if noted else "pass")
        assert statuses["sep-3182-conflict-jsonrpc-error-record"] == "pass"
        assert report.exit_code() == 0
    assert throw_count({"data": {"executions": 2, "count": 9}}) == 2


@dataclass
class Huge(Scripted):
    """Pads answers as the contract asks; a 1 MiB outcome gets `huge` done to it: "refuse"
    answers an error before running (a per-record limit), "error" runs, then answers (and
    records, and replays) an error, "forget" runs, answers an error and records nothing."""

    huge: str = "refuse"

    def call(self, params: dict[str, Any]) -> dict[str, Any]:
        pad = (params.get("arguments") or {}).get("pad") or 0
        if pad >= HUGE and self.huge == "refuse":
            data = {"type": "idempotency_record_too_large", "bytes": pad}
            return {"error": {"code": -31003, "message": "over the per-record limit", "data": data}}
        if pad >= HUGE and self.huge == "forget":
            self.execute({**params, "arguments": {"label": params["arguments"]["label"]}})
            return {"error": {"code": -32603, "message": "internal error"}}
        return super().call(params)

    def execute(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = super().execute(params)
        pad = (params.get("arguments") or {}).get("pad") or 0
        if params["name"] != RECORD or not pad or "result" not in answer:
            return answer
        if pad >= HUGE:  # huge == "error": it ran, and its outcome is this error
            return {"error": {"code": -31003, "message": "outcome too large", "data": None}}
        label, n = params["arguments"]["label"], self.counts[params["arguments"]["label"]]
        answer["result"]["content"][0]["text"] = answer_text(label, n, pad)
        return answer


@pytest.mark.parametrize(
    ("huge", "status", "says"),
    [
        ("refuse", "note", "refused without running"),  # a documented limit: runs nothing
        ("error", "pass", "its error was replayed"),  # ran once: that error is the outcome
        ("forget", "fail", "was run again (2 executions)"),  # ran, kept nothing: runs twice
    ],
)
async def test_a_huge_outcome_is_judged_by_what_ran_not_by_the_first_answer(
    huge: str, status: str, says: str
) -> None:
    report = await judge(Huge(huge=huge), "large_outcome")
    (result,) = report.results
    assert result.status == status, result.detail
    assert says in result.detail and "1048576" in result.detail, result.detail
    assert report.exit_code() == (1 if status == "fail" else 0)


@pytest.mark.parametrize("broken", [RECORD, "sep3182_count", "sep3182_fail", THROW])
async def test_a_fixture_that_breaks_the_contract_is_a_fixture_error(broken: str) -> None:
    wire = ScriptedWire(Scripted(broken=broken))
    await wire.open()
    found = await probe(wire, "t")
    assert found is not None and set(found.broken) == {broken}
    assert "without a key" in found.broken[broken] and "the contract:" in found.broken[broken]
    gated = {s.name: _gate(s, found) for s in SCENARIOS}
    assert gated["capability_initialize"] is None  # needs no fixture: it runs
    statuses = {g[0] for name, g in gated.items() if g is not None}
    assert statuses == {"fixture-error"}
    if broken == THROW:  # only the scenario that calls it
        assert [n for n, g in gated.items() if g is not None] == ["jsonrpc_error"]


async def test_absent_fixtures_block_what_needs_them_and_name_both_snippets() -> None:
    wire = ScriptedWire(Scripted(tools=(), extra_tools=("echo",)))
    await wire.open()
    found = await probe(wire, "t")
    assert found is not None and not found.required_ok and not found.broken
    gated = _gate(next(s for s in SCENARIOS if s.name == "duplicate"), found)
    assert gated is not None and gated[0] == "blocked"
    enable = gated[2]["enable"]  # type: ignore[misc]
    assert "add_fixture_tools" in enable and "TypeScript" in enable


async def test_shared_store_does_not_apply_to_one_stdio_process() -> None:
    report = await judge(Scripted(), "shared_store")
    (result,) = report.results
    assert result.status == "skip" and result.enable is None
    assert report.skipped_must() == [] and not report.incomplete()
    assert report.not_applicable_must() == ["sep-3182-shared-store"]
    assert "cannot apply here (not counted as not run): sep-3182-shared-store" in "\n".join(
        report.lines()
    )


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
results = st.dictionaries(
    st.sampled_from(["content", "structuredContent", "isError", "resultType", "x"]),
    json_leaf,
    max_size=4,
)


@settings(max_examples=examples(150), deadline=None)
@given(results, st.sampled_from(sorted(DEFAULTS)))
def test_the_allowance_is_exactly_a_default_member_present_in_one_only(
    result: dict[str, Any], member: str
) -> None:
    from idemtools.conformance.checks import Reply
    from idemtools.conformance.defaults import default_differences, without_defaults
    from idemtools.conformance.jsonvalues import strict_equal

    with_default = {**result, member: DEFAULTS[member]}
    without = {k: v for k, v in result.items() if k != member}
    one, two = Reply({"result": with_default}, 0.0), Reply({"result": without}, 0.0)
    assert one.same_result(two) and two.same_result(one)  # either direction
    assert default_differences(with_default, without) and default_differences(without, with_default)
    assert two.default_note(one) is not None
    # Any other value of that member is another result, and no allowance is claimed.
    for other in (True, 0, "", None, "incomplete"):
        if not strict_equal(other, DEFAULTS[member]):
            changed = Reply({"result": {**result, member: other}}, 0.0)
            assert not changed.same_result(one)
            assert not default_differences(with_default, changed.result or {})
    assert without_defaults(with_default) == without_defaults(without)
