"""Demo: what SEP-3182 idempotency changes, shown against a real MCP server over stdio.

    python examples/demo.py

Starts examples/payments_server.py as a subprocess (stdio, as an MCP host would), then plays the
scenarios of the SEP's reference prototype and a few more. A retry is simulated by sending the
same call again: exactly what a client does when the first answer was lost. Exits non-zero if any
scenario does not behave as the SEP says.

On stdio the server's default store keeps its records in a SQLite file in the user's state
directory. Unless `XDG_STATE_HOME` names one, the demo points the server at a temporary state
directory, removed at the end, and says so: a demo writes nothing under your home.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from idemtools.client import NO_RETRY, advertises_idempotency, call_tool
from idemtools.errors import ConflictError, InProgressError

SERVER = Path(__file__).with_name("payments_server.py")
# A key names one logical call: a new run makes new calls. On stdio the server keeps its records
# on disk across its processes, so a key reused by the next run would replay this run's answers.
RUN = uuid.uuid4().hex[:12]


def key(name: str) -> str:
    return f"{name}-{RUN}"


once = functools.partial(call_tool, retry=NO_RETRY)  # one attempt: we play the retries by hand
failures: list[str] = []


def check(ok: bool, what: str) -> None:
    print(f"   {'ok ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def wire(result: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def text(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def charges(session: ClientSession) -> int:
    result = await session.call_tool("ledger", {})
    data = wire(result).get("structuredContent") or json.loads(text(result))
    return int(data["charges"])


async def scenarios(session: ClientSession) -> None:
    print("0. capability")
    check(await advertises_idempotency(session), "server advertises capabilities.tools.idempotency")

    print("1. a retry WITHOUT a key charges twice (the problem)")
    before = await charges(session)
    await session.call_tool("charge", {"amount": 100, "currency": "usd"})
    await session.call_tool("charge", {"amount": 100, "currency": "usd"})  # the "retry"
    check(await charges(session) - before == 2, "two executions: the card was charged twice")

    print("2. a retry WITH the same idempotencyKey charges once and replays the answer")
    before = await charges(session)
    first = await call_tool(
        session, "charge", {"amount": 4200}, idempotency_key=key("k-2"), retry=NO_RETRY
    )
    again = await call_tool(
        session, "charge", {"amount": 4200}, idempotency_key=key("k-2"), retry=NO_RETRY
    )
    print(f"      first: {text(first)!r}\n      retry: {text(again)!r}")
    check(await charges(session) - before == 1, "one execution")
    check(wire(first) == wire(again), "the retry got the original answer, identical on the wire")

    print("3. the same key with other arguments is refused (idempotency_key_conflict)")
    try:
        await once(session, "charge", {"amount": 9999}, idempotency_key=key("k-2"))
        check(False, "conflict refused")
    except ConflictError as exc:
        print(f"      error.data.type = {exc.type}: {exc.message}")
        check(True, "conflict refused, nothing ran")

    print("4. arguments compare as parsed JSON: 7 and 7.0 are the same request")
    before = await charges(session)
    a = await once(session, "charge", {"amount": 7}, idempotency_key=key("k-4"))
    b = await once(session, "charge", {"amount": 7.0}, idempotency_key=key("k-4"))
    check(await charges(session) - before == 1 and wire(a) == wire(b), "7.0 replayed 7")

    print("5. a duplicate that arrives while the original still runs is refused at once")
    answers: dict[str, Any] = {}

    async def original() -> None:
        answers["first"] = await call_tool(
            session,
            "slow_transfer",
            {"amount": 50, "seconds": 1.5},
            idempotency_key=key("k-5"),
            retry=NO_RETRY,
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(original)
        await anyio.sleep(0.4)
        try:
            await call_tool(
                session,
                "slow_transfer",
                {"amount": 50, "seconds": 1.5},
                idempotency_key=key("k-5"),
                retry=NO_RETRY,
            )
            check(False, "in-progress refusal")
        except InProgressError as exc:
            print(f"      error.data = in_progress, retryAfterMs={exc.retry_after_ms}")
            check(exc.retry_after_ms > 0, "in_progress at once, with retryAfterMs")
    later = await call_tool(
        session, "slow_transfer", {"amount": 50, "seconds": 1.5}, idempotency_key=key("k-5")
    )
    check(wire(later) == wire(answers["first"]), "after it finished, the retry got its answer")

    print("6. errors are replayed too: a failed charge is not re-run by its retry")
    before = await charges(session)
    bad = await once(session, "charge", {"amount": -1}, idempotency_key=key("k-6"))
    bad2 = await once(session, "charge", {"amount": -1}, idempotency_key=key("k-6"))
    print(f"      isError={wire(bad).get('isError')}: {text(bad)!r}")
    check(wire(bad).get("isError") is True and wire(bad) == wire(bad2), "isError replayed as is")
    check(await charges(session) == before, "no charge recorded")

    print("7. calls without a key behave exactly as before (backward compatible)")
    plain = await session.call_tool("charge", {"amount": 1})
    check(
        not wire(plain).get("isError") and "charged 1" in text(plain), "unkeyed call ran normally"
    )


def where_records_go(env: dict[str, str], scratch: str) -> str:
    """Point the server's state directory at `scratch` unless the caller chose a store or a
    state directory; say where the server keeps its records."""
    if env.get("IDEMTOOLS_STORE", "").strip():
        return "in the store IDEMTOOLS_STORE names"
    if env.get("XDG_STATE_HOME"):
        return f"under XDG_STATE_HOME ({env['XDG_STATE_HOME']})"
    env["XDG_STATE_HOME"] = scratch
    return "in a temporary state directory, removed at the end; XDG_STATE_HOME chooses one"


async def main() -> int:
    # The whole environment: IDEMTOOLS_STORE and XDG_STATE_HOME reach the server (the SDK passes
    # only a few variables by default).
    env = dict(os.environ)
    # The server's own log (tracebacks of the failing charge, request logs) goes to a file.
    log_path = Path(tempfile.gettempdir()) / "idemtools-demo-server.log"
    with (
        tempfile.TemporaryDirectory(prefix="idemtools-demo-state-") as scratch,
        log_path.open("w") as errlog,
    ):
        print(f"The server keeps its records {where_records_go(env, scratch)}.\n")
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=env)
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await scenarios(session)
    print(f"\n(server log: {log_path})")
    if failures:
        print(f"{len(failures)} scenario check(s) FAILED: {failures}")
        return 1
    print("All scenarios behaved as SEP-3182 says.")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
