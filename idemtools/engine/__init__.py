"""The SEP-3182 state machine, free of any transport or SDK.

Adapters give the engine a `ToolCall` and an async `run()` that performs the SDK's ordinary
`tools/call` handling and returns its `Outcome`; they send back whatever outcome the engine
returns. Refusals come back as error outcomes carrying `error.data.type`, never as exceptions,
so no adapter can forget to translate one. The engine never imports an adapter, a store
implementation or an SDK.

One concept per module:

- `decision`: validate → policy → scope → fingerprint → answer, no I/O of its own;
- `core`: `Engine`, which orders the steps around the claim and keeps the counters;
- `execution`: the one run of a claimed call and its record (plain or transactional);
- `store_calls`: the store, wrapped once (timing and error translation);
- `runtime`: asyncio and trio: shielding an execution, its eager start, background tasks;
- `observers`: what the engine notifies (telemetry, the `on_outcome` hook, lease events);
- `lifecycle`: in-flight executions, `drain()`, `aclose()`.
"""

from __future__ import annotations

from . import decision, execution, store_calls
from .core import Engine, EngineStats
from .decision import REPLAY_META_KEY, ToolCall, key_digest
from .decision import claimed_at as claimed_at
from .decision import new_owner as new_owner

# Names of the single-module engine that other modules (cli/keys.py, server/installation.py)
# and tests import from `idemtools.engine`, kept importable here.
_digest = decision.digest
_retry_after_ms = decision.retry_after_ms
_scope_digest = decision.scope_digest
_scope_hash = decision.scope_hash
_store_name = store_calls.store_name
_Execution = execution.Execution

__all__ = [
    "REPLAY_META_KEY",
    "Engine",
    "EngineStats",
    "ToolCall",
    "key_digest",
]
