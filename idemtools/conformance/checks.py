"""The checks of the SEP's own scenarios, in the order a run takes them.

`sentences` holds what each check tests, `scenario` the machinery every scenario uses, and
`sep/` the scenarios themselves, one module per concern; this module puts them in order. The
catalogue adds the checks that need no fixture tool (`unfixtured`) and the families'
(`families/`). The names re-exported here are the ones the kit's tests import.
"""

from __future__ import annotations

from .contract import FIXTURE_TOOLS, THROW
from .scenario import Context, OpenError, Reply, Scenario, _scenario, record
from .sentences import CHECKS, SEP_URL, CheckInfo
from .sep.arguments import (
    equivalence_escapes,
    equivalence_key_order,
    equivalence_meta,
    equivalence_numbers,
    equivalence_whitespace,
    no_normalization,
)
from .sep.capability import capability_discover, capability_initialize
from .sep.conflict import conflict_error_record, conflicts
from .sep.error_codes import base_error_codes
from .sep.in_progress import in_progress
from .sep.keys import key_case, key_unicode, key_whitespace
from .sep.not_retries import mrtr, unkeyed
from .sep.replay import duplicate, error_replayed, jsonrpc_error, replay_identity
from .sep.scope import retention, scope_across_connections, scope_per_caller, shared_store
from .wire import LEGACY, MODERN

__all__ = [
    "CHECKS",
    "SCENARIOS",
    "SEP_URL",
    "CheckInfo",
    "Context",
    "OpenError",
    "Reply",
    "Scenario",
    "base_error_codes",
    "record",
]


SCENARIOS: list[Scenario] = [
    _scenario(
        capability_initialize, "capability-initialize", eras=frozenset({LEGACY}), fixtures=()
    ),
    _scenario(capability_discover, "capability-discover", eras=frozenset({MODERN}), fixtures=()),
    _scenario(duplicate, "duplicate-not-executed", "duplicate-returns-original"),
    _scenario(
        replay_identity,
        "replay-json-identical",
        "replay-raw-identical",
        "replay-meta-identical",
        "replay-json-equal",
    ),
    _scenario(error_replayed, "error-replayed"),
    _scenario(
        jsonrpc_error,
        "error-replayed-jsonrpc",
        "conflict-jsonrpc-error-record",
        fixtures=(*FIXTURE_TOOLS, THROW),
    ),
    _scenario(
        in_progress,
        "in-progress-no-second-execution",
        "in-progress-not-blocked",
        "in-progress-rejected-immediately",
        "in-progress-error-data",
        "in-progress-original-replayed",
    ),
    _scenario(
        conflicts,
        "conflict-rejected",
        "conflict-not-executed",
        "conflict-no-cached-result",
        "conflict-error-data",
        "conflict-tool-name",
    ),
    _scenario(conflict_error_record, "conflict-error-record"),
    _scenario(equivalence_meta, "equivalence-meta-ignored"),
    _scenario(equivalence_key_order, "equivalence-key-order"),
    _scenario(equivalence_whitespace, "equivalence-whitespace"),
    _scenario(equivalence_escapes, "equivalence-escapes"),
    _scenario(equivalence_numbers, "equivalence-numbers"),
    _scenario(no_normalization, "no-unicode-normalization"),
    _scenario(key_case, "key-case-sensitive"),
    _scenario(key_whitespace, "key-whitespace-significant"),
    _scenario(key_unicode, "key-unicode-exact"),
    _scenario(unkeyed, "unkeyed-unaffected"),
    _scenario(scope_per_caller, "scope-per-caller"),
    _scenario(scope_across_connections, "scope-across-connections"),
    _scenario(mrtr, "mrtr-continuation-excluded", eras=frozenset({MODERN})),
    _scenario(shared_store, "shared-store"),
    _scenario(retention, "retention-window"),
    # Last: it reads every error answer the era's checks received.
    _scenario(
        base_error_codes,
        "mcp-base-error-codes-reserved",
        "mcp-base-error-codes-legacy",
        eras=frozenset({MODERN}),
        fixtures=(),
    ),
]
