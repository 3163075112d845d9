"""Keys for MCP tool calls made inside a DBOS step: `keyed_call`, `step_key`.

    from dbos import DBOS
    from idemtools.integrations.dbos import keyed_call

    @DBOS.step()
    async def charge(order: str, amount: int) -> str:
        async with connect() as session:            # an mcp ClientSession, initialized
            result = await keyed_call(session, "charge", {"order": order, "amount": amount})
        return result.content[0].text

DBOS records a step's output when the step returns. A worker that dies after the tool ran and
before that record leaves the workflow pending; DBOS recovers it (on the next launch, or on
another executor) and runs the step again, which calls the tool again. The server cannot tell
that call from a new one unless it carries the same key.

The key (read in dbos 3.4): a digest of the workflow id (`DBOS.workflow_id`), the step id
(`DBOS.step_id`: the step's position in the workflow), the index of the call within
this execution of the step, the tool's name and its canonical arguments. DBOS records the step's
output under exactly (workflow id, step id) and replays a recovered workflow by running its code
again with the same ids, so the re-executed step has the ids of the interrupted one; the step id
of any other step of the workflow differs, and DBOS never runs a second workflow under an id it
has seen (starting one returns the existing workflow, or is refused). A DBOS retry of the step
(`retries_allowed`) has the same ids too: it is the same operation, and sends the same keys.

Not covered: a workflow started under a new id (including `DBOS.fork_workflow`) is a new
operation and runs the tool again. `DBOS.rewind_workflow` re-runs steps under their old ids:
their calls are replayed by the server (within retention), not run again. A step whose arguments
change between executions (computed from the clock or randomness inside the step) sends another
key: compute such values in an earlier step, whose output DBOS records.

An answer of `idempotency_outcome_unknown` raises `OutcomeUnknownError` (inside an exception
group when the session was opened in the step). DBOS records it as the step's error and the
workflow gets it, unless the step allows retries: DBOS then retries every exception (read in
dbos 3.4, `Outcome.retry`) unless the step's `should_retry` predicate says no, and each retry
would send the same key and get the same answer. There is no error class DBOS leaves alone, so
give such a step `should_retry=should_retry`:

    @DBOS.step(retries_allowed=True, should_retry=should_retry)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dbos import DBOS  # type: ignore[import-not-found,unused-ignore]  # an optional extra

from ..client.keyed_session import KeyedSession
from ._durable import attempt_calls, outcome_unknown_in

__all__ = ["key_for", "keyed_call", "should_retry", "step_identity", "step_key"]

ENGINE = "dbos"


def step_identity() -> tuple[str, str]:
    """(workflow id, step id) of the DBOS step running now; RuntimeError outside a step."""
    workflow_id = DBOS.workflow_id
    step_id = DBOS.step_id
    if workflow_id is None or step_id is None:
        raise RuntimeError(
            "idemtools.integrations.dbos needs a running DBOS step: call it inside a function "
            "decorated with @DBOS.step() (a workflow's own code is re-run on recovery, and only "
            "a step has an id DBOS records)"
        )
    return str(workflow_id), str(step_id)


def step_key(name: str, arguments: Mapping[str, Any] | None = None) -> str:
    """The key of this step's next call of `name` with `arguments` (it counts as a call).

    For clients other than an mcp session: `idemtools.client.call_tool(..., idempotency_key=
    step_key(name, arguments))`."""
    status = DBOS.step_status
    calls = attempt_calls(ENGINE, step_identity(), status, getattr(status, "current_attempt", None))
    return calls.key(name, arguments)


def key_for(name: str, arguments: Mapping[str, Any] | None) -> str | None:
    """`step_key` inside a DBOS step, None elsewhere: a `key_for=` for clients that take one.

    `KeyedMCPToolset(url, id=..., key_for=key_for)` under pydantic-ai's `DBOSAgent`: the
    agent runs each MCP tool call as a DBOS step, so the call sends this step's derived key;
    outside a step (None) the client's own rule picks the key."""
    if DBOS.workflow_id is None or DBOS.step_id is None:
        return None
    return step_key(name, arguments)


def should_retry(error: BaseException) -> bool:
    """A `should_retry=` for `@DBOS.step(retries_allowed=True, ...)`: False for an unknown
    outcome (the error itself, or in an exception group), True for anything else.

    Why: the step's retry would send the same key and get the same answer, `max_attempts`
    times, and the workflow would then get `DBOSMaxStepRetriesExceeded` instead of the error.
    With it, the first attempt's error is the step's, recorded by DBOS: the workflow gets it
    at once (and again, from the record, on recovery). To add a rule of your own:
    `should_retry=lambda e: should_retry(e) and mine(e)`."""
    return outcome_unknown_in(error) is None


async def keyed_call(
    session: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """`session.call_tool(name, arguments, **kwargs)` with this step's derived key.

    `session`: an mcp `ClientSession` (or 2.x `Client`), or a `KeyedSession` for its options
    (`require_capability=False`, `in_progress_wait=`). A plain session is wrapped in a
    `KeyedSession`, which refuses a server that does not advertise idempotency (it would ignore
    the key) and waits out `idempotency_key_in_progress` (the interrupted execution may still
    be running on the server). Returns the SDK's `CallToolResult`. `idempotency_outcome_unknown`
    raises `OutcomeUnknownError`: a step that allows retries needs `should_retry=should_retry`
    for DBOS not to retry it."""
    key = step_key(name, arguments)
    keyed = session if isinstance(session, KeyedSession) else KeyedSession(session)
    return await keyed.call_tool(name, arguments, idempotency_key=key, **kwargs)
