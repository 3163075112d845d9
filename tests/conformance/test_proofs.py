"""The four proofs that the kit discriminates, against real server processes.

1. The example server passes on this mcp release, over stdio and stateless HTTP, in every era
   the release serves (both on 2.x).
2. The same server without `install()` fails the MUST checks it should, named here.
3. A re-creation of the SEP's reference prototype fails exactly the checks its behaviour
   deserves.
4. A TypeScript-SDK server with the fixtures and no idempotency: capability missing, a keyed
   duplicate executed twice (tests/conformance/test_typescript.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from idemtools.conformance.catalogue import CHECKS, SCENARIOS
from idemtools.conformance.report import STATUSES
from idemtools.conformance.unfixtured import OMITTABLE

from .kit import (
    ERAS,
    HERE,
    IDEMTOOLS_MAY_FAIL,
    LEGACY,
    LINE,
    MODERN,
    PY,
    Kit,
    http_server,
    run_kit,
    server_command,
)

pytestmark = pytest.mark.slow

ALICE = "Authorization: Bearer demo-alice"
BOB = "Authorization: Bearer demo-bob"
# need --also / --retention
OPTIONAL = {
    "sep-3182-shared-store",
    "sep-3182-retention-window",
    "sep-3182-retention-window-every-outcome",
}


def ids_for(era: str) -> set[str]:
    """The checks of a run against a server with the fixtures (the named-tool replay checks
    are left out there: the fixtures judge the same sentence)."""
    return {c for s in SCENARIOS if era in s.eras and s.name not in OMITTABLE for c in s.checks}


def s(*names: str) -> set[str]:
    return {f"sep-3182-{n}" for n in names}


# mcp 1.x FastMCP cannot answer a JSON-RPC error from a tool: no sep3182_throw there, and the two
# checks that need it are skipped, naming the fixture.
NO_THROW = s("error-replayed-jsonrpc", "conflict-jsonrpc-error-record") if LINE == 1 else set()
# The base-spec check idemtools fails while its own codes are in the reserved sub-range.
MAY_FAIL = IDEMTOOLS_MAY_FAIL if LINE == 2 else set()


# idemtools keeps no outcome over its per-record size limit (`max_outcome_bytes`, 1 MiB by
# default): the retry of the kit's 1 MiB outcome is refused without running, which the kit
# passes as a NOTE naming the size.
NOTED = s("replay-large-outcome")


def assert_idemtools_passes(kit: Kit, skipped: set[str]) -> None:
    """idemtools passes every check that runs, except exactly MAY_FAIL (see kit.py); the
    allowances it needs are at most NOTED."""
    assert kit.failures() == MAY_FAIL, kit.out
    assert kit.code == (1 if MAY_FAIL else 0), kit.out + kit.err
    assert kit.report["summary"]["eras"] == ERAS
    expected = {
        era: ids_for(era) - skipped - (MAY_FAIL if era == MODERN else set()) for era in ERAS
    }
    passed, noted = kit.by_era("pass"), kit.by_era("note")
    assert {e: passed.get(e, set()) | noted.get(e, set()) for e in ERAS} == expected
    for check in kit.report["checks"]:
        if check["status"] == "note":
            assert check["id"] in NOTED, check
            assert "size limit" in check["detail"] and "1048576" in check["detail"], check


def test_example_server_passes_over_stdio(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("example"))
    # stdio: one local user, one caller; a new connection is a new process
    not_applicable = s("scope-per-caller", "scope-across-connections")
    assert_idemtools_passes(kit, OPTIONAL | not_applicable | NO_THROW)
    last = kit.out.splitlines()[-1]
    if MAY_FAIL:
        assert last == "not conformant"
    else:  # MUST checks were skipped: never "conformant"
        assert last.startswith("incomplete:"), last
    # stdio has no second instance: shared-store cannot apply, and is not counted as not run.
    did_not_run = {"sep-3182-retention-window", "sep-3182-retention-window-every-outcome"}
    did_not_run |= NO_THROW
    assert set(kit.report["summary"]["skipped_must"]) == did_not_run
    assert f"{len(did_not_run)} MUST check" in kit.out
    assert "--retention SECONDS" in kit.out and "--also URL" not in kit.out


def test_example_server_passes_over_stateless_http_with_two_callers(tmp_path: Path) -> None:
    with http_server("example") as url:
        kit = run_kit(tmp_path, "--header", ALICE, "--second-header", BOB, url)
        refused = run_kit(
            tmp_path,
            "--era",
            LEGACY,
            "--header",
            ALICE,
            "--second-header",
            "Authorization: Bearer wrong",
            url,
        )
        anonymous = run_kit(tmp_path, url)
    # Credentials the target refuses are a misconfigured run (exit 2), not a failed check.
    assert refused.code == 2 and "sep-3182-scope-per-caller" in refused.err, refused.err
    assert anonymous.code == 2 and "--header" in anonymous.err
    assert_idemtools_passes(kit, OPTIONAL | NO_THROW)
    for era in ERAS:
        assert kit.check("sep-3182-scope-per-caller", era)["status"] == "pass"
        assert kit.check("sep-3182-scope-across-connections", era)["status"] == "pass"


# Every MUST a server that ignores the key breaks: it executes every call.
WITHOUT_INSTALL = (
    s(
        "capability-initialize",
        "duplicate-not-executed",
        "duplicate-returns-original",
        "error-replayed",
        "in-progress-no-second-execution",
        "conflict-rejected",
        "conflict-not-executed",
        "conflict-tool-name",
        "conflict-error-record",
        "equivalence-key-order",
        "equivalence-whitespace",
        "equivalence-escapes",
        "equivalence-numbers",
        "equivalence-meta-ignored",
        "no-unicode-normalization",
        "in-progress-original-replayed",
        "replay-json-identical",
        # Two keys are two operations there too, but neither replays its own result.
        "key-case-sensitive",
        "key-whitespace-significant",
        "key-unicode-exact",
        "key-long-distinct",
        # The checks derived rule by rule: each needs a keyed retry recognised.
        "conflict-nested-arguments",
        "conflict-value-types",
        "conflict-record-unchanged",
        "replay-large-outcome",
        "retention-after-other-keys",
        "concurrent-duplicates-one-execution",
        "in-progress-late-duplicates",
        "in-progress-conflict-not-executed",
    )
    | (s("capability-discover") if LINE == 2 else set())
    | (s("error-replayed-jsonrpc", "conflict-jsonrpc-error-record") - NO_THROW)
)


def test_example_server_without_install_fails_the_musts_it_should(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("example-no-install"))
    assert kit.code == 1
    # One bug, one failure: every keyed retry runs again, so the checks that need a retry to be
    # recognised are blocked by the first one that saw it.
    first = s("capability-initialize", "duplicate-not-executed") | (
        s("capability-discover") if LINE == 2 else set()
    )
    assert kit.ids("fail", "MUST") == first
    assert kit.failures("MUST") - first == WITHOUT_INSTALL - first
    for check in kit.report["checks"]:
        if check["status"] == "blocked" and check["id"] not in NO_THROW:
            assert check["blocked_by"] == "sep-3182-duplicate-not-executed", check
    assert set(kit.report["summary"]["unexpected_failures"]) == WITHOUT_INSTALL
    # What executing every call does not break: it answers, it never blocks, it runs unkeyed
    # calls, and a re-execution with other arguments is not the cached result.
    assert s("unkeyed-unaffected", "in-progress-not-blocked", "conflict-no-cached-result") <= (
        kit.ids("pass")
    )
    assert "2 executions" in kit.check("sep-3182-duplicate-not-executed")["detail"]
    if not NO_THROW:
        detail = kit.check("sep-3182-error-replayed-jsonrpc")["detail"]
        assert "executed again (2 executions)" in detail
    assert "not conformant" in kit.out


# The prototype's behaviour and the checks it deserves to fail:
# - no capability on the wire                       -> capability-initialize
# - records only after the tool finished             -> in-progress-no-second-execution (and the
#   in-progress SHOULDs: the duplicate runs instead of being refused)
# - fingerprint of the arguments alone, one dict     -> conflict-tool-name (another tool replays,
#                                                       so no conflict error.data either)
# - json.dumps(sort_keys=True): "1" != "1.0"         -> equivalence-numbers
# - the duplicate that ran overwrites the record      -> in-progress-original-replayed (a retry
#                                                       gets the duplicate's result)
# Key order, whitespace and escapes are resolved by parsing plus sort_keys, so those pass; the
# raw key, `_meta` outside the fingerprint and the recorded error replies pass too.
# - any JSON value is a key (42 included)            -> malformed-key-refused (SHOULD)
# - records only after the tool finished, again      -> in-progress-late-duplicates (every
#                                                       duplicate of a running call runs) and
#                                                       in-progress-conflict-not-executed (other
#                                                       arguments meanwhile run too)
PROTOTYPE = s(
    "capability-initialize",
    "malformed-key-refused",
    "in-progress-no-second-execution",
    "in-progress-original-replayed",
    "in-progress-rejected-immediately",
    "in-progress-error-data",
    "conflict-tool-name",
    "conflict-error-data",
    "equivalence-numbers",
    "in-progress-late-duplicates",
    "in-progress-conflict-not-executed",
)
# ... and what it fails through those: a conflict by tool name is not refused, so whether the
# record survives a refused conflict cannot be judged (blocked by conflict-tool-name).
PROTOTYPE_BLOCKED = s("conflict-record-unchanged")
# Its fixture tools predate `pad`: the large-outcome check is skipped, naming the fixture. It
# sends no data.notProcessed (an extension beyond the SEP): that INFO check is skipped too.
PROTOTYPE_SKIPPED = s("replay-large-outcome", "not-processed-hint")


def test_sep_prototype_fails_exactly_what_its_behaviour_deserves(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", PY, str(HERE / "prototype_server.py"))
    assert kit.code == 1
    assert kit.report["summary"]["eras"] == [LEGACY]  # no server/discover
    assert kit.ids("fail") == PROTOTYPE
    assert kit.ids("blocked") == PROTOTYPE_BLOCKED
    not_applicable = s("scope-per-caller", "scope-across-connections")  # stdio
    assert kit.ids("pass") == (
        ids_for(LEGACY)
        - PROTOTYPE
        - PROTOTYPE_BLOCKED
        - PROTOTYPE_SKIPPED
        - OPTIONAL
        - not_applicable
    )
    assert "recorded result" in kit.check("sep-3182-conflict-tool-name")["detail"]


def test_baseline_turns_known_failures_green_and_stale_entries_red(tmp_path: Path) -> None:
    musts = sorted(c for c in PROTOTYPE | PROTOTYPE_BLOCKED if CHECKS[c].level == "MUST")
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("# the prototype, as adopted\n" + "\n".join(musts) + "\n")
    command = ["--", PY, str(HERE / "prototype_server.py")]
    kit = run_kit(tmp_path, "--baseline", str(baseline), *command)
    assert kit.code == 0, kit.out
    assert kit.report["summary"]["expected_failures"] == musts
    assert "XFAIL" in kit.out
    # The same baseline in the official suite's expected-failures YAML shape.
    official = tmp_path / "expected-failures.yml"
    official.write_text(
        "server:\n"
        "  - capability_initialize\n"
        "  - in_progress                  # the whole scenario may fail\n"
        "  - in_progress_throughout\n"
        "  - conflicts:sep-3182-conflict-tool-name\n"
        "  - conflict_record\n"
        "  - sep-3182-equivalence-numbers\n"
        "client:\n"
        "  - auth/basic-dcr\n"
    )
    kit = run_kit(tmp_path, "--baseline", str(official), *command)
    assert kit.code == 0, kit.out
    assert set(musts) <= set(kit.report["summary"]["expected_failures"])
    baseline.write_text("\n".join([*musts, "sep-3182-unkeyed-unaffected"]))  # passes: stale
    kit = run_kit(tmp_path, "--baseline", str(baseline), *command)
    assert kit.code == 1
    assert kit.report["summary"]["stale_baseline"] == ["sep-3182-unkeyed-unaffected"]


def test_lowlevel_server_with_fixtures_passes_over_stdio(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("lowlevel"))
    # A low-level server answers sep3182_throw on both mcp lines.
    assert_idemtools_passes(kit, OPTIONAL | s("scope-per-caller", "scope-across-connections"))
    # --require-all: the MUST check that did not run (no --retention) fails the run.
    strict = run_kit(tmp_path, "--era", LEGACY, "--require-all", "--", *server_command("lowlevel"))
    assert strict.code == 1 and strict.ids("fail") == set(), strict.out
    assert strict.report["summary"]["require_all"] is True
    assert set(strict.report["summary"]["skipped_must"]) == {
        "sep-3182-retention-window",
        "sep-3182-retention-window-every-outcome",
    }
    assert strict.out.splitlines()[-1] == "not conformant"


@pytest.mark.parametrize("store", ["shared", "per-instance"])
def test_shared_store_across_two_instances(tmp_path: Path, store: str) -> None:
    def env(name: str) -> dict[str, str]:
        if store == "shared":
            return {"IDEMTOOLS_STORE": f"sqlite:///{tmp_path / 'shared.db'}"}
        return {"IDEMTOOLS_STORE": "memory://"}

    with http_server("example", env("a")) as one, http_server("example", env("b")) as two:
        kit = run_kit(tmp_path, "--era", LEGACY, "--header", ALICE, "--also", two, one)
    check = kit.check("sep-3182-shared-store")
    if store == "shared":
        assert kit.code == 0 and check["status"] == "pass", kit.out
    else:
        assert kit.code == 1 and check["status"] == "fail", kit.out
        assert "executed the retry" in check["detail"]


@pytest.mark.parametrize(("kept", "documented", "status"), [(3, 2, "pass"), (0.4, 2, "fail")])
def test_retention_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: float, documented: float, status: str
) -> None:
    """A record kept as long as documented replays within the window; one kept shorter fails."""
    monkeypatch.setenv("IDEMTOOLS_TEST_RETENTION", str(kept))
    command = ["--", *server_command("short-retention")]
    kit = run_kit(tmp_path, "--require-all", "--retention", str(documented), *command)
    for era in ERAS:  # --retention applies to every era
        assert kit.check("sep-3182-retention-window", era)["status"] == status, kit.out
    if status == "fail":
        assert kit.code == 1
    else:  # only the reserved-code check may fail, and only while idemtools' codes are there
        assert kit.ids("fail") == MAY_FAIL, kit.out
        # Every MUST check the transport allows ran: --require-all can pass over stdio.
        assert set(kit.report["summary"]["skipped_must"]) == NO_THROW, kit.out
        if not MAY_FAIL and not NO_THROW:
            assert kit.code == 0 and kit.out.splitlines()[-1] == "conformant", kit.out


@pytest.mark.skipif(LINE != 2, reason="mcp 1.x serves no 2026-07-28")
def test_one_era_only(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--era", MODERN, "--", *server_command("example"))
    assert kit.code == (1 if MAY_FAIL else 0)
    assert kit.report["summary"]["eras"] == [MODERN]
    assert {c["era"] for c in kit.report["checks"]} == {MODERN}


def test_the_json_report_has_the_documented_shape(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--era", LEGACY, "--", PY, str(HERE / "prototype_server.py"))
    assert set(kit.report) == {"target", "checks", "summary"}
    assert kit.report["target"].endswith("prototype_server.py")
    old = {"id", "level", "status", "section", "detail", "era"}  # the fields before INFO/blocked
    for check in kit.report["checks"]:
        info = CHECKS[check["id"]]
        assert old <= set(check) <= old | {"text", "url", "evidence", "blocked_by", "enable"}
        assert check["level"] in ("MUST", "SHOULD", "MAY", "INFO")
        assert check["status"] in STATUSES
        assert check["section"] == info.section
        assert check["text"] == info.text and check["url"] == info.url
        if check["status"] != "skip":  # the requests and answers that decided it
            assert check["evidence"] and all(
                set(e) == {"request", "answer"} or set(e) == {"omitted"} for e in check["evidence"]
            )
    conflict = kit.check("sep-3182-conflict-tool-name")
    assert any('"sep3182_record_slow"' in e.get("request", "") for e in conflict["evidence"])
    summary = kit.report["summary"]
    assert summary["total"] == len(kit.report["checks"])
    counted = ("passed", "failed", "skipped", "blocked", "fixture_errors")
    assert sum(summary[k] for k in counted) == summary["total"]
    assert summary["exit_code"] == kit.code
    lines = kit.out.splitlines()
    marks = (*(status.upper() for status in STATUSES), "XFAIL")
    check_lines = [line for line in lines if line.split()[0] in marks]
    assert len(check_lines) == len(kit.report["checks"])
    for line, check in zip(check_lines, kit.report["checks"], strict=True):
        assert f"{check['id']} [{check['era']}] {check['section']}: " in line  # names the section
    schema = json.loads((HERE.parents[1] / "docs" / "conformance-report.schema.json").read_text())
    try:
        import jsonschema
    except ImportError:  # the schema's enums, checked by hand
        checks = schema["properties"]["checks"]["items"]["properties"]
        assert {c["level"] for c in kit.report["checks"]} <= set(checks["level"]["enum"])
        assert {c["status"] for c in kit.report["checks"]} <= set(checks["status"]["enum"])
    else:
        jsonschema.validate(kit.report, schema)
