"""The operator's way into one idempotency record: `idemtools keys show|release`.

Why: a tool that hung, or a process that died mid-call, leaves a key `in_progress` until its
lease or `max_runtime` runs out, and a client retrying meanwhile is refused; a process that died
inside the tool leaves a `lapsed` claim for the tool's retention, which a retry answers as its
`on_lapse` says (`refuse`: `idempotency_outcome_unknown`, for good). At 3 a.m. the operator
needs to see that record (state, owner, age, expiry; never the outcome's content unless asked:
it is client data) and, once sure nothing runs for it any more (and, for a lapsed claim, that
its side effect did not happen), free it — fenced by the owner token, so that a release never
frees a newer claim, and logged.

Records live under (scope hash, key). The scope is given the way the server stores or logs it:
the 64-hex scope hash (`scope=` in idemtools' ERROR lines), or the scope value a strategy
returns (`shared`, `local`, or the JSON array, e.g. `["sub", "https://issuer", "alice"]`),
which is hashed exactly as the engine hashes it.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from ..engine.decision import claimed_at, key_digest, scope_digest
from ..outcome import Outcome
from ..scopes import _local_identity
from ..stores.base import ForgettingStore, Record, Status, Store

__all__ = ["KeysError", "ReleaseResult", "describe", "release", "scope_hash"]

log = logging.getLogger("idemtools")

_HASH = re.compile(r"[0-9a-f]{64}")


class KeysError(Exception):
    """A refusal the CLI prints on one line (exit code 1)."""


def scope_hash(scope: str) -> str:
    """The stored scope hash for what an operator typed; see the module docstring.

    `shared` and `local` (the OS user running this command, on this host: the scope of a
    stdio server started by that user here) name built-in strategies; a JSON array is a
    scope value (re-encoded as the strategies encode it, so spacing does not matter);
    64 lowercase hex digits are a scope hash already.
    """
    text = scope.strip()
    if _HASH.fullmatch(text):
        return text
    if text == "shared":
        return scope_digest(json.dumps(["shared"]))
    if text == "local":
        return scope_digest(_local_identity())
    if text.startswith("["):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise KeysError(f"--scope is not valid JSON: {exc}") from None
        if not isinstance(value, list) or not value or not isinstance(value[0], str):
            raise KeysError('--scope JSON must be an array such as ["sub", ISSUER, SUBJECT]')
        return scope_digest(json.dumps(value))
    raise KeysError(
        "--scope takes a 64-hex scope hash (scope= in the server's log), shared, local, or "
        'a scope value as a JSON array, e.g. \'["sub", "https://issuer.example", "alice"]\''
    )


def describe(record: Record, *, key: str, scope: str, outcome: bool, now: float) -> dict[str, Any]:
    """What `keys show` prints, as plain data: never the outcome's content unless asked."""
    at = claimed_at(record.owner)
    shown: dict[str, Any] = {
        "state": record.status.value,
        "key_digest": key_digest(key),
        "scope": scope,
        "owner": record.owner,
        "claimed_at": None if at is None else _iso(at),
        "lapsed_at": None if record.lapsed_at is None else _iso(record.lapsed_at),
        "age_seconds": None if at is None else round(max(0.0, now - at), 3),
        "expires_in_seconds": round(record.remaining, 3),
        "fingerprint": record.fingerprint,
        "outcome_bytes": None if record.outcome is None else len(record.outcome),
    }
    if record.status is Status.COMPLETED and record.outcome is not None:
        try:
            kept = Outcome.from_bytes(record.outcome)
            shown["outcome_kind"] = "error" if kept.error is not None else "result"
        except ValueError:
            shown["outcome_kind"] = "unreadable"
        if outcome:
            try:
                shown["outcome"] = json.loads(record.outcome)
            except ValueError:
                shown["outcome"] = record.outcome.decode("utf-8", "replace")
    return shown


@dataclass(frozen=True)
class ReleaseResult:
    released: bool
    state: str
    owner: str


async def release(
    store: Store,
    scope: str,
    key: str,
    *,
    owner: str | None = None,
    force: bool = False,
) -> ReleaseResult:
    """Free one key, fenced by its owner token; logged at WARNING on the `idemtools` logger.

    An in-progress or lapsed claim is released only if it is still held by the owner read
    here (or by `owner`, when the operator copied it from `keys show`): a claim made meanwhile
    is never freed. Releasing a lapsed claim (an execution that entered the tool and whose end
    was never recorded) is the deliberate way to let the next retry run the tool again, once
    the operator knows its side effect did not happen. A completed record is refused unless
    `force` (its retry would run the tool again); then it is deleted, again only if its owner
    is still the one read (`Store.forget`).
    """
    record = await store.get(scope, key)
    digest = key_digest(key)
    if record is None:
        raise KeysError(f"no live record for key_digest={digest} in scope {scope}")
    if owner is not None and record.owner != owner:
        raise KeysError(
            f"key_digest={digest} is held by owner {record.owner}, not {owner}: not released "
            "(a newer claim may be running)"
        )
    if record.status is Status.COMPLETED:
        if not force:
            raise KeysError(
                f"key_digest={digest} is completed: its outcome is replayed to retries. "
                "Releasing it makes the next retry run the tool again; pass --force to do so"
            )
        if not isinstance(store, ForgettingStore):
            raise KeysError(f"the {store.kind} store cannot delete a completed record")
        done = bool(await store.forget(scope, key, record.owner))
    else:
        done = bool(await store.release(scope, key, record.owner))
        if not done and record.status is Status.LAPSED:
            again = await store.get(scope, key)
            if again is not None and again.status is Status.LAPSED and again.owner == record.owner:
                raise KeysError(
                    f"key_digest={digest} is a lapsed claim the {store.kind} store did not "
                    "release: the store does not release lapsed claims (see Stores, the store "
                    "protocol); it is dropped when the tool's retention ends"
                )
    if done:
        log.warning(
            "operator released key_digest=%s scope=%s owner=%s state=%s%s",
            digest,
            scope,
            record.owner,
            record.status.value,
            " (forced)" if record.status is Status.COMPLETED else "",
        )
    else:
        log.warning(
            "operator release found key_digest=%s changed meanwhile (owner %s no longer holds "
            "it); nothing released",
            digest,
            record.owner,
        )
    return ReleaseResult(released=done, state=record.status.value, owner=record.owner)


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
