"""The SEP-3182 state machine, free of any transport or SDK.

Adapters give the engine a `ToolCall` and an async `run()` that performs the SDK's ordinary
`tools/call` handling and returns its `Outcome`; they send back whatever outcome the engine
returns. Refusals come back as error outcomes carrying `error.data.type`, never as exceptions,
so no adapter can forget to translate one. The engine never imports an adapter, a store
implementation or an SDK.

One concept per module:

- `decision`: validate → policy → scope → fingerprint → answer, no I/O of its own;
- `core`: `Engine`, which orders the steps around the claim;
- `stats`: `EngineStats`, the counters every step adds to;
- `execution`: the one run of a claimed call and its record (plain or transactional);
- `unknown`: how an execution ends (released, recorded, or its outcome unknown);
- `lapse`: a claim found lapsed (`on_lapse`) and the write past `max_runtime`;
- `store_calls`: the store, wrapped once (timing and error translation);
- `lease_keeper`: the thread that renews the leases of running calls;
- `runtime`: asyncio and trio: shielding an execution, its eager start, background tasks;
- `observers`: what the engine notifies (telemetry, the `on_outcome` hook, lease events);
- `telemetry`: the OpenTelemetry spans and metrics, and the words every observer shares;
- `lifecycle`: in-flight executions, `drain()`, `aclose()`.

This module is the engine's face: it names what other parts of idemtools and users import, and
no module of the engine imports it (they import each other directly).
"""

from __future__ import annotations

from .core import Engine
from .decision import REPLAY_META_KEY, ToolCall, key_digest
from .decision import claimed_at as claimed_at
from .decision import new_owner as new_owner
from .stats import EngineStats

__all__ = [
    "REPLAY_META_KEY",
    "Engine",
    "EngineStats",
    "ToolCall",
    "key_digest",
]
