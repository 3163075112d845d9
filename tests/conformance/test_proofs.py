"""The four proofs that the kit discriminates (issue 10), against real server processes.

1. The example server passes on this mcp release, over stdio and stateless HTTP, in every era
   the release serves (both on 2.x).
2. The same server without `install()` fails the MUST checks it should, named here.
3. A re-creation of the SEP's reference prototype fails exactly the checks its behaviour
   deserves.
4. A TypeScript-SDK server with the fixtures and no idempotency: capability missing, a keyed
   duplicate executed twice (tests/conformance/test_typescript.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from idemtools.conformance.checks import CHECKS, SCENARIOS

from .kit import ERAS, HERE, LEGACY, LINE, MODERN, PY, http_server, run_kit, server_command

pytestmark = pytest.mark.slow

ALICE = "Authorization: Bearer demo-alice"
BOB = "Authorization: Bearer demo-bob"
OPTIONAL = {"sep-3182-shared-store", "sep-3182-retention-window"}  # need --also / --retention


def ids_for(era: str) -> set[str]:
    return {c for s in SCENARIOS if era in s.eras for c in s.checks}


def s(*names: str) -> set[str]:
    return {f"sep-3182-{n}" for n in names}


def test_example_server_passes_over_stdio(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("example"))
    assert kit.code == 0, kit.out + kit.err
    assert kit.report["summary"]["eras"] == ERAS
    assert kit.ids("fail") == set()
    skipped = OPTIONAL | s("scope-per-caller")  # stdio: one local user, one caller
    assert kit.by_era("pass") == {era: ids_for(era) - skipped for era in ERAS}
    assert "conformant" in kit.out.splitlines()[-1]


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
    assert kit.code == 0, kit.out + kit.err
    assert kit.report["summary"]["eras"] == ERAS
    assert kit.by_era("pass") == {era: ids_for(era) - OPTIONAL for era in ERAS}
    for era in ERAS:
        assert kit.check("sep-3182-scope-per-caller", era)["status"] == "pass"


# Every MUST a server that ignores the key breaks: it executes every call.
WITHOUT_INSTALL = s(
    "capability-initialize",
    "duplicate-not-executed",
    "duplicate-returns-original",
    "error-replayed",
    "in-progress-no-second-execution",
    "conflict-rejected",
    "conflict-not-executed",
    "conflict-tool-name",
    "equivalence-key-order",
    "equivalence-whitespace",
    "equivalence-escapes",
    "equivalence-numbers",
    "no-unicode-normalization",
) | (s("capability-discover") if LINE == 2 else set())


def test_example_server_without_install_fails_the_musts_it_should(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("example-no-install"))
    assert kit.code == 1
    assert kit.ids("fail", "MUST") == WITHOUT_INSTALL
    assert set(kit.report["summary"]["unexpected_failures"]) == WITHOUT_INSTALL
    # What executing every call does not break: it answers, it never blocks, it runs unkeyed
    # calls, and a re-execution with other arguments is not the cached result.
    assert s("unkeyed-unaffected", "in-progress-not-blocked", "conflict-no-cached-result") <= (
        kit.ids("pass")
    )
    assert "2 executions" in kit.check("sep-3182-duplicate-not-executed")["detail"]
    assert "not conformant" in kit.out


# The prototype's behaviour and the checks it deserves to fail:
# - no capability on the wire                       -> capability-initialize
# - records only after the tool finished             -> in-progress-no-second-execution (and the
#   in-progress SHOULDs: the duplicate runs instead of being refused)
# - fingerprint of the arguments alone, one dict     -> conflict-tool-name (another tool replays,
#                                                       so no conflict error.data either)
# - json.dumps(sort_keys=True): "1" != "1.0"         -> equivalence-numbers
# Key order, whitespace and escapes are resolved by parsing plus sort_keys, so those pass.
PROTOTYPE = s(
    "capability-initialize",
    "in-progress-no-second-execution",
    "in-progress-rejected-immediately",
    "in-progress-error-data",
    "conflict-tool-name",
    "conflict-error-data",
    "equivalence-numbers",
)


def test_sep_prototype_fails_exactly_what_its_behaviour_deserves(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", PY, str(HERE / "prototype_server.py"))
    assert kit.code == 1
    assert kit.report["summary"]["eras"] == [LEGACY]  # no server/discover
    assert kit.ids("fail") == PROTOTYPE
    assert kit.ids("pass") == ids_for(LEGACY) - PROTOTYPE - OPTIONAL - s("scope-per-caller")
    assert "recorded result" in kit.check("sep-3182-conflict-tool-name")["detail"]


def test_baseline_turns_known_failures_green_and_stale_entries_red(tmp_path: Path) -> None:
    musts = sorted(c for c in PROTOTYPE if CHECKS[c].level == "MUST")
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("# the prototype, as adopted\n" + "\n".join(musts) + "\n")
    command = ["--", PY, str(HERE / "prototype_server.py")]
    kit = run_kit(tmp_path, "--baseline", str(baseline), *command)
    assert kit.code == 0, kit.out
    assert kit.report["summary"]["expected_failures"] == musts
    assert "XFAIL" in kit.out
    baseline.write_text("\n".join([*musts, "sep-3182-unkeyed-unaffected"]))  # passes: stale
    kit = run_kit(tmp_path, "--baseline", str(baseline), *command)
    assert kit.code == 1
    assert kit.report["summary"]["stale_baseline"] == ["sep-3182-unkeyed-unaffected"]


def test_lowlevel_server_with_fixtures_passes_over_stdio(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--", *server_command("lowlevel"))
    assert kit.code == 0, kit.out + kit.err
    assert kit.ids("fail") == set()
    assert kit.report["summary"]["eras"] == ERAS


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
    kit = run_kit(tmp_path, "--era", LEGACY, "--retention", str(documented), *command)
    assert kit.check("sep-3182-retention-window")["status"] == status, kit.out
    assert kit.code == (0 if status == "pass" else 1)


@pytest.mark.skipif(LINE != 2, reason="mcp 1.x serves no 2026-07-28")
def test_one_era_only(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--era", MODERN, "--", *server_command("example"))
    assert kit.code == 0
    assert kit.report["summary"]["eras"] == [MODERN]
    assert {c["era"] for c in kit.report["checks"]} == {MODERN}


def test_the_json_report_has_the_documented_shape(tmp_path: Path) -> None:
    kit = run_kit(tmp_path, "--era", LEGACY, "--", PY, str(HERE / "prototype_server.py"))
    assert set(kit.report) == {"target", "checks", "summary"}
    assert kit.report["target"].endswith("prototype_server.py")
    for check in kit.report["checks"]:
        assert set(check) == {"id", "level", "status", "section", "detail", "era"}
        assert check["level"] in ("MUST", "SHOULD", "MAY")
        assert check["status"] in ("pass", "fail", "skip")
        assert check["section"] == CHECKS[check["id"]].section
    summary = kit.report["summary"]
    assert summary["total"] == len(kit.report["checks"])
    assert summary["passed"] + summary["failed"] + summary["skipped"] == summary["total"]
    assert summary["exit_code"] == kit.code
    lines = kit.out.splitlines()
    assert len([line for line in lines if line.split()[0] in ("PASS", "FAIL", "SKIP")]) == len(
        kit.report["checks"]
    )
