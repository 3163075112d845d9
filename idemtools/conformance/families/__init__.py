"""The kit's check families, and the checks derived rule by rule that live in modules of their own.

Every scenario belongs to one family (the rule it tests: replay, conflict, arguments, ...), so
that a run can be narrowed to one family (`idemtools conformance --family NAME`), as the kit's
own mutant suite does; a conformance verdict always needs the full kit. The modules here add the
checks that came from listing, for every rule, the ways an implementation gets it wrong
(docs/conformance.md, "The rule table"); `register` adds them to the tables of `checks`.
"""

from __future__ import annotations

import dataclasses

from ..scenario import Scenario, _scenario
from ..sentences import PREREQUISITE, CheckInfo
from . import (
    arguments,
    concurrency,
    conflict_record,
    keys,
    not_processed,
    outcomes,
    running,
)

__all__ = ["FAMILIES", "family_of", "register"]

# family -> what its checks test (the --family choices, in the order the kit runs them)
FAMILIES: dict[str, str] = {
    "capability": "the tools.idempotency capability is declared",
    "replay": "a completed duplicate is not executed and gets the recorded outcome, every kind",
    "in-progress": "a duplicate of a running call, early or late, and other arguments under "
    "its key are refused, and nothing runs twice",
    "conflict": "other arguments under a used key are refused and leave the record as it was",
    "arguments": "equivalent arguments match, different ones conflict, at any depth",
    "keys": "a key is an opaque string, matched exactly",
    "unkeyed": "calls without a key behave as before",
    "scope": "records are scoped to the caller, and outlive a connection",
    "mrtr": "MRTR continuations are not retries",
    "shared-store": "every instance sees every record",
    "retention": "records outlive the documented window and other callers' keys",
    "concurrency": "identical keyed calls arriving at the same instant run once",
    "not-processed": "refusals say data.notProcessed truthfully (beyond SEP-3182: INFO)",
    "base": "error codes of the base specification",
}

_EXISTING: dict[str, str] = {
    "capability_initialize": "capability",
    "capability_discover": "capability",
    "duplicate": "replay",
    "replay_identity": "replay",
    "error_replayed": "replay",
    "jsonrpc_error": "replay",
    "in_progress": "in-progress",
    "conflicts": "conflict",
    "conflict_error_record": "conflict",
    "equivalence_meta": "arguments",
    "equivalence_key_order": "arguments",
    "equivalence_whitespace": "arguments",
    "equivalence_escapes": "arguments",
    "equivalence_numbers": "arguments",
    "no_normalization": "arguments",
    "key_case": "keys",
    "key_whitespace": "keys",
    "key_unicode": "keys",
    "unkeyed": "unkeyed",
    "scope_per_caller": "scope",
    "scope_across_connections": "scope",
    "mrtr": "mrtr",
    "shared_store": "shared-store",
    "retention": "retention",
    "base_error_codes": "base",
    # The checks that need no fixture tool (a target the operator did not write).
    "tool_replay": "replay",
    "key_not_a_string": "keys",
    "error_object": "base",
}
_MODULES = (arguments, conflict_record, keys, outcomes, concurrency, running, not_processed)


def family_of(scenario: Scenario) -> str:
    """The family a scenario belongs to."""
    return scenario.family or _EXISTING[scenario.name]


def register(checks: dict[str, CheckInfo], scenarios: list[Scenario]) -> None:
    """Add every family module's checks and scenarios to the kit's tables, in place.

    A new check rests on the keyed retry being recognised (`PREREQUISITE`), as the others do;
    a module's scenario that replaces an existing one by name (the retention wait, shared by
    two checks) takes its place, and the base-spec scenario stays last (it reads every error
    the era's other checks received).
    """
    for module in _MODULES:
        for info in module.CHECKS:
            checks[info.id] = dataclasses.replace(info, after=PREREQUISITE)
    base = scenarios.pop()
    by_name = {s.name: i for i, s in enumerate(scenarios)}
    for module in _MODULES:
        for run, ids, family, eras in module.SCENARIOS:
            scenario = dataclasses.replace(_scenario(run, *ids, eras=eras), family=family)
            if scenario.name in by_name:
                scenarios[by_name[scenario.name]] = scenario
            else:
                scenarios.append(scenario)
    scenarios.append(base)
    for i, scenario in enumerate(scenarios):
        scenarios[i] = dataclasses.replace(scenario, family=family_of(scenario))
