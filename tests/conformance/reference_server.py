"""A reference SEP-3182 server for the kit's own tests, and the bugs the kit must catch in it.

Written from the SEP text alone, with no idemtools and no MCP SDK (not one import of either), so
that it cannot share their bugs: it speaks newline-delimited JSON-RPC on stdio, or streamable
HTTP (plain JSON answers; uvicorn carries the bytes) with `--http PORT`. It serves both
protocol eras (2025-11-25 `initialize`, 2026-07-28 `server/discover`), the five fixture tools
of the conformance contract, and SEP-3182 itself:

- the `tools.idempotency` capability;
- records keyed by (scope, key) in SQLite: process memory by default, a file shared by several
  instances with `--store FILE`; the key is claimed before the tool runs;
- equivalence over the tool name and the parsed `arguments` (numbers by exact value, object
  members in any order, strings as parsed: no Unicode normalisation); `_meta` is not compared;
  keys are compared exactly;
- a running duplicate refused at once (`idempotency_key_in_progress`), other arguments refused
  (`idempotency_key_conflict`), both with `data.notProcessed: true` (beyond the SEP: the
  error-registry draft's "this request provably had no effect"), every outcome replayed byte
  for byte: results, `isError` results and JSON-RPC errors;
- records kept `--retention` seconds after completion; scope = the bearer token on HTTP, the
  process's local user on stdio; MRTR continuations (`requestState`, `inputResponses`) are not
  retries: they run as unkeyed calls.

`--mutant NAME` (repeatable, or `SEP3182_REF_MUTANTS=a,b`) switches on one bug each; `MUTANTS`
lists them and tests/conformance/mutants.py says which check must catch each. Codes: refusals
use application codes outside JSON-RPC's reserved -32768..-32000; -32602 for invalid params.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sqlite3
import sys
import time
import traceback
import unicodedata
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

LEGACY, MODERN = "2025-11-25", "2026-07-28"
LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", LEGACY)
RECORD, RECORD_SLOW, FAIL, COUNT, THROW = (
    "sep3182_record",
    "sep3182_record_slow",
    "sep3182_fail",
    "sep3182_count",
    "sep3182_throw",
)
IN_PROGRESS_CODE = -31001
CONFLICT_CODE = -31002
TOO_LARGE_CODE = -31003
LARGE = 32 * 1024  # what the large-outcome mutants call large
HUGE = 512 * 1024  # ... and the size limit of record-size-limit
LEASE = 0.3  # seconds: the in-progress claim of in-progress-lease-expires, never renewed
THROW_CODE = 1001
INVALID_PARAMS = -32602

MUTANTS = frozenset(
    {
        # blind spots the kit once had
        "throw-reexecuted",
        "in-progress-corrupts",
        "error-record-any-args",
        "jsonrpc-error-record-any-args",
        "meta-compared",
        "key-casefold",
        "key-trimmed",
        "key-nfc",
        "key-any-json",
        "error-code-text",
        "replay-adds-default",
        "replay-number-type",
        "replay-bool-type",
        "replay-reserialised",
        "replay-meta-timestamp",
        "scope-per-connection",
        "reserved-code",
        "legacy-code",
        # the existing check families
        "no-capability",
        "key-ignored",
        "replay-reexecutes",
        "replay-wrong-result",
        "errors-not-replayed",
        "conflict-not-detected",
        "conflict-executes",
        "conflict-ignores-tool-name",
        "conflict-no-data-type",
        "equiv-raw-text",
        "equiv-key-order",
        "equiv-whitespace",
        "equiv-escapes",
        "equiv-numbers",
        "unicode-normalised",
        "in-progress-executes",
        "in-progress-waits",
        "in-progress-hangs",
        "in-progress-no-data",
        "scope-none",
        "retention-zero",
        "retention-short",
        "store-per-instance",
        "unkeyed-affected",
        "mrtr-keyed",
        # derived rule by rule (docs/conformance.md, the rule table)
        "capability-true",
        "replay-drops-iserror",
        "replay-drops-structured",
        "throw-replay-drops-data",
        "large-not-recorded",
        "large-truncated",
        "huge-reexecuted",
        "key-per-tool",
        "key-truncated",
        "args-top-level-only",
        "args-nested-keys-dropped",
        "args-lists-sorted",
        "args-lists-deduped",
        "args-str-leaves",
        "args-python-equality",
        "args-null-dropped",
        "args-strings-folded",
        "args-empty-equal",
        "conflict-overwrites",
        "conflict-deletes",
        "race-check-then-set",
        "retention-lru-100",
        "retention-errors-short",
        "retention-large-short",
        "not-processed-on-replay",
        "huge-error-unrecorded",
        "in-progress-lease-expires",
        "in-progress-conflict-executes",
        "conflict-clears-error-record",
        # conforming variants (not bugs): the kit must pass them
        "retention-forever",
        "record-size-limit",
    }
)

_LABEL = {"type": "string"}
_PAYLOAD: dict[str, Any] = {}


def _schema(**extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"label": _LABEL, "payload": _PAYLOAD, **extra},
        "required": ["label"],
    }


TOOLS = [
    {"name": RECORD, "inputSchema": _schema(pad={"type": "integer", "minimum": 0})},
    {"name": RECORD_SLOW, "inputSchema": _schema(ms={"type": "integer", "minimum": 0})},
    {"name": FAIL, "inputSchema": _schema()},
    {"name": THROW, "inputSchema": _schema()},
    {
        "name": COUNT,
        "inputSchema": {"type": "object", "properties": {"label": _LABEL}, "required": ["label"]},
    },
]
TOOL_NAMES = {t["name"] for t in TOOLS}

Outcome = tuple[str, str]  # ("result" | "error", the JSON text of that member)


class Invalid(Exception):
    """Invalid params: answered -32602 before anything is claimed or run."""


# -- canonical comparison -------------------------------------------------------------------------


def parse_exact(text: str) -> Any:
    """Parsed JSON with every number as its exact value (`1`, `1.0` and `1e0` are one Fraction)."""
    return json.loads(text, parse_float=Fraction, parse_int=Fraction)


def canonical(value: Any, *, ordered: bool = False, nfc: bool = False) -> str:
    """One text per parsed JSON value: sorted members, exact numbers, strings as parsed."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float, Fraction)):
        exact = Fraction(value)
        return f"{exact.numerator}/{exact.denominator}"
    if isinstance(value, str):
        return json.dumps(unicodedata.normalize("NFC", value) if nfc else value)
    if isinstance(value, Pairs):
        pairs = list(value) if ordered else sorted(dict(value).items())
        return (
            "{"
            + ",".join(
                f"{canonical(k, nfc=nfc)}:{canonical(v, ordered=ordered, nfc=nfc)}"
                for k, v in pairs
            )
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(canonical(v, ordered=ordered, nfc=nfc) for v in value) + "]"
    if isinstance(value, dict):
        return canonical(Pairs(value.items()), ordered=ordered, nfc=nfc)
    raise TypeError(type(value))


class Pairs(list):  # type: ignore[type-arg]
    """An object's members in the order written (for the key-order mutant)."""


_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def raw_member(text: str, path: tuple[str, ...]) -> str | None:
    """The raw text of a member (by path) in a JSON object text, as written; None if absent."""
    decoder = json.JSONDecoder()
    start, end = _WS.match(text, 0).end(), len(text)  # type: ignore[union-attr]
    for name in path:
        i = start
        if text[i : i + 1] != "{":
            return None
        i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        found: tuple[int, int] | None = None
        while text[i : i + 1] != "}":
            member, i = decoder.raw_decode(text, i)
            i = _WS.match(text, i).end()  # type: ignore[union-attr]
            i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]  # past ':'
            _, value_end = decoder.raw_decode(text, i)
            if member == name:
                found = (i, value_end)
            i = _WS.match(text, value_end).end()  # type: ignore[union-attr]
            if text[i : i + 1] == ",":
                i = _WS.match(text, i + 1).end()  # type: ignore[union-attr]
        if found is None:
            return None
        start, end = found
    return text[start:end]


# -- the record store -----------------------------------------------------------------------------


@dataclass
class Row:
    fingerprint: str
    owner: str
    kind: str | None  # None while the original still runs
    body: str | None


class Store:
    """Records keyed by (scope, key): SQLite in memory, or a file several instances share."""

    def __init__(self, path: str | None, lease: float | None = None) -> None:
        self.lease = lease  # a claim in progress expires after this (mutant); None: never
        self.db = sqlite3.connect(path or ":memory:", isolation_level=None, timeout=10)
        if path:
            self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS records (scope TEXT, key TEXT, fingerprint TEXT, "
            "owner TEXT, kind TEXT, body TEXT, expires REAL, PRIMARY KEY (scope, key))"
        )

    @staticmethod
    def _k(scope: str, key: str) -> tuple[str, str]:
        # ASCII JSON text: exact, and storable even with lone surrogates.
        return json.dumps(scope), json.dumps(key)

    def claim(self, scope: str, key: str, fingerprint: str) -> tuple[str, Row | None]:
        """("claimed", None) with the key now ours, or ("found", the live record)."""
        k = self._k(scope, key)
        owner = uuid.uuid4().hex
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute(
                "SELECT fingerprint, owner, kind, body, expires FROM records "
                "WHERE scope = ? AND key = ?",
                k,
            ).fetchone()
            if row is not None and row[4] is not None and row[4] <= time.time():
                self.db.execute("DELETE FROM records WHERE scope = ? AND key = ?", k)
                row = None
            if row is None:
                lease = None if self.lease is None else time.time() + self.lease
                self.db.execute(
                    "INSERT INTO records VALUES (?, ?, ?, ?, NULL, NULL, ?)",
                    (*k, fingerprint, owner, lease),
                )
                self.db.execute("COMMIT")
                return "claimed", Row(fingerprint, owner, None, None)
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return "found", Row(row[0], row[1], row[2], row[3])

    def get(self, scope: str, key: str) -> Row | None:
        row = self.db.execute(
            "SELECT fingerprint, owner, kind, body, expires FROM records "
            "WHERE scope = ? AND key = ?",
            self._k(scope, key),
        ).fetchone()
        if row is None or (row[4] is not None and row[4] <= time.time()):
            return None
        return Row(row[0], row[1], row[2], row[3])

    def complete(
        self, scope: str, key: str, owner: str, outcome: Outcome, keep: float | None
    ) -> None:
        expires = None if keep is None else time.time() + keep
        self.db.execute(
            "UPDATE records SET kind = ?, body = ?, expires = ? "
            "WHERE scope = ? AND key = ? AND owner = ?",
            (*outcome, expires, *self._k(scope, key), owner),
        )

    def release(self, scope: str, key: str, owner: str) -> None:
        self.db.execute(
            "DELETE FROM records WHERE scope = ? AND key = ? AND owner = ?",
            (*self._k(scope, key), owner),
        )

    def reclaim(self, scope: str, key: str) -> None:
        """Mutant in-progress-corrupts: the duplicate takes the claim over; the original's
        completion then matches no owner and is lost."""
        self.db.execute(
            "UPDATE records SET owner = ? WHERE scope = ? AND key = ?",
            (uuid.uuid4().hex, *self._k(scope, key)),
        )

    def put(self, scope: str, key: str, fingerprint: str, outcome: Outcome, keep: float) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*self._k(scope, key), fingerprint, "-", *outcome, time.time() + keep),
        )

    def claim_in_two_steps(self, scope: str, key: str, fingerprint: str) -> Row:
        """Mutant race-check-then-set, second step: write the claim whatever is there now."""
        owner = uuid.uuid4().hex
        self.db.execute(
            "INSERT OR REPLACE INTO records VALUES (?, ?, ?, ?, NULL, NULL, NULL)",
            (*self._k(scope, key), fingerprint, owner),
        )
        return Row(fingerprint, owner, None, None)

    def refingerprint(self, scope: str, key: str, fingerprint: str) -> None:
        """Mutant conflict-overwrites: the refused call's arguments replace the original's."""
        self.db.execute(
            "UPDATE records SET fingerprint = ? WHERE scope = ? AND key = ?",
            (fingerprint, *self._k(scope, key)),
        )

    def forget(self, scope: str, key: str) -> None:
        """Mutant conflict-deletes: a refused conflict drops the record."""
        self.db.execute("DELETE FROM records WHERE scope = ? AND key = ?", self._k(scope, key))

    def evict_beyond(self, count: int) -> None:
        """Mutant retention-lru-100: only the newest `count` records are kept."""
        self.db.execute(
            "DELETE FROM records WHERE rowid NOT IN "
            "(SELECT rowid FROM records ORDER BY rowid DESC LIMIT ?)",
            (count,),
        )


# -- the server -----------------------------------------------------------------------------------


@dataclass
class Caller:
    """Who sent a request: the authorization boundary and, for the per-connection mutant, the
    session or connection it came on."""

    principal: str
    connection: str = ""


def _dumps(value: Any) -> str:
    return json.dumps(value)


def _error(code: int, message: str, data: Any = None) -> Outcome:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return "error", _dumps(error)


def _retype(value: Any, change: Callable[[Any], Any]) -> Any:
    if isinstance(value, dict):
        return {k: v if k == "code" else _retype(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_retype(v, change) for v in value]
    return change(value)


@dataclass
class Server:
    mutants: frozenset[str] = frozenset()
    retention: float = 600.0
    store_path: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = self.mutants - MUTANTS
        if unknown:
            raise SystemExit(f"unknown mutant(s): {', '.join(sorted(unknown))}")
        path = None if "store-per-instance" in self.mutants else self.store_path
        self.store = Store(path, LEASE if self.has("in-progress-lease-expires") else None)
        self.forever = asyncio.Event()  # never set: what in-progress-hangs waits for

    def has(self, mutant: str) -> bool:
        return mutant in self.mutants

    # -- JSON-RPC

    async def handle(self, text: str, caller: Caller) -> str | None:
        """One JSON-RPC message; the answer line, or None for a notification or a response."""
        try:
            message = json.loads(text)
        except ValueError:
            return _envelope(None, _error(-32700, "parse error"))
        if not isinstance(message, dict) or "method" not in message:
            return None if isinstance(message, dict) else _envelope(None, _error(-32600, "bad"))
        if "id" not in message:
            return None
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        try:
            outcome = await self.dispatch(str(message["method"]), params, text, caller)
        except Invalid as exc:
            outcome = _error(INVALID_PARAMS, str(exc))
            if self.has("error-code-text"):
                error = json.loads(outcome[1])
                outcome = "error", _dumps({**error, "code": str(error["code"])})
        except Exception as exc:  # a bug here must answer, not leave the client waiting
            traceback.print_exc()
            outcome = _error(-32603, f"internal error: {exc!r}")
        return _envelope(message["id"], outcome)

    def _capabilities(self) -> dict[str, Any]:
        tools: dict[str, Any] = {} if self.has("no-capability") else {"idempotency": {}}
        if self.has("capability-true"):
            tools["idempotency"] = True
        return {"tools": tools}

    async def dispatch(
        self, method: str, params: dict[str, Any], text: str, caller: Caller
    ) -> Outcome:
        info = {"name": "sep3182-reference", "version": "0"}
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in LEGACY_VERSIONS else LEGACY
            result = {
                "protocolVersion": version,
                "capabilities": self._capabilities(),
                "serverInfo": info,
            }
            return "result", _dumps(result)
        if method == "server/discover":
            result = {
                "supportedVersions": [MODERN],
                "capabilities": self._capabilities(),
                "serverInfo": info,
                "cacheScope": "private",
                "resultType": "complete",
            }
            return "result", _dumps(result)
        if method == "ping":
            return "result", "{}"
        if method == "tools/list":
            return "result", _dumps({"tools": TOOLS})
        if method == "tools/call":
            return await self.call_tool(params, text, caller)
        return _error(-32601, f"method not found: {method}")

    # -- tools/call

    def _validate(self, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        name = params.get("name")
        if name not in TOOL_NAMES:
            raise Invalid(f"unknown tool {name!r}")
        arguments = params.get("arguments")
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict) or not isinstance(arguments.get("label"), str):
            raise Invalid("arguments must be an object with a string label")
        ms = arguments.get("ms", 0)
        if name == RECORD_SLOW and (type(ms) is not int or ms < 0):
            raise Invalid("ms must be an integer >= 0")
        key = params.get("idempotencyKey")
        if key is not None and not isinstance(key, str) and not self.has("key-any-json"):
            raise Invalid("idempotencyKey must be a string")
        return str(name), arguments

    async def execute(self, name: str, arguments: dict[str, Any]) -> Outcome:
        label = arguments["label"]
        if name == COUNT:
            n = self.counts.get(label, 0)
        else:
            n = self.counts[label] = self.counts.get(label, 0) + 1
        if name == RECORD_SLOW:
            await asyncio.sleep(arguments.get("ms", 0) / 1000)
        if name == THROW:
            data = {"label": label, "count": n}
            return _error(THROW_CODE, f"{THROW}: the tool threw, as asked", data)
        answer: dict[str, Any] = {"label": label, "executions": n}
        pad = arguments.get("pad")
        if name == RECORD and type(pad) is int and pad > 0:
            answer["pad"] = "x" * pad
        result = {
            "content": [{"type": "text", "text": _dumps(answer)}],
            "structuredContent": answer,
            "isError": name == FAIL,
        }
        return "result", _dumps(result)

    def scope(self, caller: Caller, name: str = "") -> str:
        if self.has("key-per-tool"):
            return f"{caller.principal}|{name}"
        if self.has("scope-none"):
            return ""
        if self.has("scope-per-connection"):
            return f"{caller.principal}|{caller.connection}"
        return caller.principal

    def identity(self, key: str) -> str:
        """The key as records are looked up by: exactly as sent."""
        if self.has("key-casefold"):
            key = key.casefold()
        if self.has("key-trimmed"):
            key = key.strip()
        if self.has("key-nfc"):
            key = unicodedata.normalize("NFC", key)
        if self.has("key-truncated"):
            key = key[:200]  # a VARCHAR(200) column
        return key

    def fingerprint(self, name: str, params: dict[str, Any], text: str) -> str:
        """What equivalence compares: the tool name and the parsed arguments, nothing else."""
        raw = raw_member(text, ("params", "arguments"))
        raw = "{}" if raw is None or raw.strip() == "null" else raw
        arguments: Any
        if self.has("equiv-raw-text"):
            arguments = raw
        elif self.has("equiv-numbers"):
            typed = json.loads(raw)  # ints and floats kept apart: 1 != 1.0
            arguments = _retype(typed, lambda v: f"{type(v).__name__}:{v!r}")
        else:
            hook = Pairs if self.has("equiv-key-order") else None
            arguments = _shortcut(
                json.loads(raw, parse_float=Fraction, parse_int=Fraction, object_pairs_hook=hook),
                self.mutants,
            )
        parts: list[Any] = [
            canonical(
                arguments, ordered=self.has("equiv-key-order"), nfc=self.has("unicode-normalised")
            )
        ]
        if not self.has("conflict-ignores-tool-name"):
            parts.append(name)
        if self.has("meta-compared"):
            parts.append(canonical(params.get("_meta")))
        if self.has("equiv-whitespace"):
            parts.append(re.findall(r"\s+", _STRING.sub('""', raw)))
        if self.has("equiv-escapes"):
            parts.append(sorted(_STRING.findall(raw)))  # the spellings, in any member order
        return _dumps(parts)

    def keep(self, outcome: Outcome | None = None) -> float | None:
        if self.has("retention-forever"):
            return None
        if outcome is not None and self._kept_short(outcome):
            return self.retention / 4
        if self.has("retention-zero"):
            return 0.0
        if self.has("retention-short"):
            return self.retention / 4
        return self.retention

    async def call_tool(self, params: dict[str, Any], text: str, caller: Caller) -> Outcome:
        name, arguments = self._validate(params)
        key = params.get("idempotencyKey")
        if key is not None and not isinstance(key, str):  # key-any-json: 42 is the key "42"
            key = _dumps(key)
        continuation = "requestState" in params or "inputResponses" in params
        if name == COUNT or (continuation and not self.has("mrtr-keyed")):
            key = None  # the count is never keyed; an MRTR continuation is not a retry
        if key is None and self.has("unkeyed-affected") and name != COUNT:
            key = "\0" + self.fingerprint(name, params, text)  # "no key: dedupe by arguments"
        if key is None or self.has("key-ignored"):
            return await self.execute(name, arguments)
        sent = key
        scope, key, fp = (
            self.scope(caller, name),
            self.identity(key),
            self.fingerprint(name, params, text),
        )
        if self.has("in-progress-executes"):
            return await self._record_after(scope, key, sent, fp, name, arguments)
        if self.has("race-check-then-set"):
            row = self.store.get(scope, key)
            if row is not None:
                return await self._repeated(scope, key, sent, fp, row, name, arguments)
            await asyncio.sleep(0.005)  # an async store's round trip between the two steps
            status, row = "claimed", self.store.claim_in_two_steps(scope, key, fp)
        else:
            status, row = self.store.claim(scope, key, fp)
        assert row is not None
        running = status == "found" and row.kind is None
        if running and row.fingerprint != fp and self.has("in-progress-conflict-executes"):
            return await self.execute(name, arguments)  # one flight per key *and* arguments
        if status == "claimed":
            try:
                outcome = await self.execute(name, arguments)
            except BaseException:  # cancelled: nothing was recorded, the key is free again
                self.store.release(scope, key, row.owner)
                raise
            if self.has("huge-error-unrecorded") and len(outcome[1]) > HUGE:
                self.store.release(scope, key, row.owner)  # ran, kept nothing, said "error"
                return _error(-32603, "internal error: the outcome is too large to record")
            if self._forgets(outcome):
                self.store.release(scope, key, row.owner)
            else:
                self.store.complete(
                    scope, key, row.owner, self._stored(outcome), self.keep(outcome)
                )
                if self.has("retention-lru-100"):
                    self.store.evict_beyond(100)
            return outcome
        return await self._repeated(scope, key, sent, fp, row, name, arguments)

    def _forgets(self, outcome: Outcome) -> bool:
        kind, body = outcome
        if len(body) > HUGE and self.has("huge-reexecuted"):
            return True
        if len(body) > LARGE and self.has("large-not-recorded"):
            return True
        if kind == "error":
            return self.has("throw-reexecuted")
        return self.has("errors-not-replayed") and json.loads(body).get("isError") is True

    async def _record_after(
        self, scope: str, key: str, sent: str, fp: str, name: str, arguments: dict[str, Any]
    ) -> Outcome:
        """Mutant in-progress-executes: a record is written only once the tool has finished."""
        row = self.store.get(scope, key)
        if row is not None:
            return await self._repeated(scope, key, sent, fp, row, name, arguments)
        outcome = await self.execute(name, arguments)
        self.store.put(scope, key, fp, outcome, self.retention)
        return outcome

    async def _repeated(
        self,
        scope: str,
        key: str,
        sent: str,
        fp: str,
        row: Row,
        name: str,
        arguments: dict[str, Any],
    ) -> Outcome:
        """The key is taken: refuse (conflict, in progress) or replay the recorded outcome."""
        if row.fingerprint != fp and not self._replays_anyway(row):
            if self.has("conflict-executes"):
                await self.execute(name, arguments)
            if self.has("conflict-overwrites"):
                self.store.refingerprint(scope, key, fp)
            if self.has("conflict-deletes"):
                self.store.forget(scope, key)
            if self.has("conflict-clears-error-record") and row.kind == "error":
                self.store.forget(scope, key)  # "an error outcome may be retried anyway"
            return self._conflict(sent)
        while row.kind is None:
            if self.has("in-progress-corrupts"):
                self.store.reclaim(scope, key)
            if self.has("in-progress-hangs"):
                await self.forever.wait()
            if not self.has("in-progress-waits"):
                code = -32001 if self.has("legacy-code") else IN_PROGRESS_CODE
                data = None
                if not self.has("in-progress-no-data"):
                    data = {
                        "type": "idempotency_key_in_progress",
                        "idempotencyKey": sent,
                        "notProcessed": True,
                    }
                return _error(code, "a request with this idempotencyKey is in progress", data)
            await asyncio.sleep(0.02)
            row = self.store.get(scope, key) or row
        assert row.kind is not None and row.body is not None
        if self.has("replay-reexecutes"):
            await self.execute(name, arguments)
        return self._replay(row.kind, row.body)

    def _replays_anyway(self, row: Row) -> bool:
        if self.has("conflict-not-detected"):
            return True
        if row.kind == "error":
            return self.has("jsonrpc-error-record-any-args")
        if row.kind == "result" and row.body is not None:
            is_error = json.loads(row.body).get("isError") is True
            return is_error and self.has("error-record-any-args")
        return False

    def _conflict(self, sent: str) -> Outcome:
        code = -32077 if self.has("reserved-code") else CONFLICT_CODE
        data = {"type": "idempotency_key_conflict", "idempotencyKey": sent, "notProcessed": True}
        if self.has("conflict-no-data-type"):
            del data["type"]
        return _error(code, "idempotencyKey was used with different arguments", data)

    def _kept_short(self, outcome: Outcome) -> bool:
        kind, body = outcome
        if self.has("retention-large-short") and len(body) > LARGE:
            return True
        if not self.has("retention-errors-short"):
            return False
        return kind == "error" or json.loads(body).get("isError") is True

    def _stored(self, outcome: Outcome) -> Outcome:
        """What is written to the record (the size mutants and the size limit change it)."""
        kind, body = outcome
        if self.has("record-size-limit") and len(body) > HUGE:
            return "too-large", str(len(body))
        if self.has("large-truncated") and len(body) > LARGE and kind == "result":
            result = json.loads(body)
            for block in result.get("content", []):
                block["text"] = block.get("text", "")[: LARGE // 2]
            result.pop("structuredContent", None)
            return kind, _dumps(result)
        return outcome

    def _replay(self, kind: str, body: str) -> Outcome:
        """The recorded outcome, as recorded (the mutants change it on the way out)."""
        if kind == "too-large":  # a documented per-record limit: refused, nothing runs
            data = {"type": "idempotency_record_too_large", "bytes": int(body)}
            return _error(TOO_LARGE_CODE, "the recorded outcome is over the 512 KiB limit", data)
        if kind == "result" and (
            self.has("replay-drops-iserror") or self.has("replay-drops-structured")
        ):
            result = json.loads(body)
            if self.has("replay-drops-iserror"):
                result.pop("isError", None)
            if self.has("replay-drops-structured"):
                result.pop("structuredContent", None)
            body = _dumps(result)
        if kind == "error" and self.has("throw-replay-drops-data"):
            error = json.loads(body)
            error.pop("data", None)
            body = _dumps(error)
        if kind == "error" and self.has("not-processed-on-replay"):
            error = json.loads(body)
            error["data"] = {**(error.get("data") or {}), "notProcessed": True}
            body = _dumps(error)
        if self.has("replay-wrong-result") and kind == "result":
            gone = {"content": [{"type": "text", "text": "already done"}], "isError": False}
            return kind, _dumps(gone)
        if self.has("replay-number-type"):
            body = _dumps(_retype(json.loads(body), _floated))
        if self.has("replay-bool-type"):
            body = _dumps(_retype(json.loads(body), _inted))
        if self.has("replay-reserialised"):
            body = json.dumps(json.loads(body), separators=(",", ":"), sort_keys=True)
        if self.has("replay-adds-default") and kind == "result":
            result = json.loads(body)
            if "isError" in result and result["isError"] is False:
                del result["isError"]
            elif "isError" not in result:
                result["isError"] = False
            body = _dumps(result)
        if self.has("replay-meta-timestamp") and kind == "result":
            stamp = _dumps({"replayedAt": time.time()})
            body = body[:-1] + f', "_meta": {stamp}' + "}"
        return kind, body


def _shortcut(value: Any, mutants: frozenset[str]) -> Any:
    """The argument-comparison shortcuts of the args-* mutants, applied to parsed arguments."""

    def leaf(v: Any) -> Any:
        if "args-empty-equal" in mutants and (v == "" or v is None):
            return None
        if "args-python-equality" in mutants and isinstance(v, bool):
            return Fraction(int(v))  # Python: True == 1, False == 0
        if "args-strings-folded" in mutants and isinstance(v, str):
            return v.strip().casefold()
        if "args-str-leaves" in mutants and not isinstance(v, str):
            if isinstance(v, Fraction):
                return str(v.numerator) if v.denominator == 1 else str(v)
            return json.dumps(v)  # true, false, null: as their text
        return v

    def walk(v: Any, depth: int, top: frozenset[str]) -> Any:
        if isinstance(v, (dict, list)) and depth > 0 and "args-top-level-only" in mutants:
            return type(v).__name__  # only the top level is compared
        if isinstance(v, dict):
            items = [(k, walk(x, depth + 1, top)) for k, x in v.items()]
            if "args-nested-keys-dropped" in mutants and depth > 0:
                items = [(k, x) for k, x in items if k in top]  # JSON.stringify(v, topKeys)
            if "args-null-dropped" in mutants:
                items = [(k, x) for k, x in items if x is not None]
            if "args-empty-equal" in mutants and not items:
                return None
            return type(v)(items) if isinstance(v, Pairs) else dict(items)
        if isinstance(v, list):
            items = [walk(x, depth + 1, top) for x in v]
            if "args-lists-deduped" in mutants:
                items = [x for i, x in enumerate(items) if x not in items[:i]]
            if "args-lists-sorted" in mutants:
                items.sort(key=lambda x: canonical(x))
            if "args-empty-equal" in mutants and not items:
                return None
            return items
        return leaf(v)

    top = frozenset(value) if isinstance(value, dict) else frozenset()
    return walk(value, 0, top)


def _floated(value: Any) -> Any:
    return float(value) if type(value) is int else value


def _inted(value: Any) -> Any:
    return int(value) if type(value) is bool else value


def _envelope(rid: Any, outcome: Outcome) -> str:
    kind, body = outcome
    return '{"jsonrpc": "2.0", "id": ' + _dumps(rid) + ', "' + kind + '": ' + body + "}"


# -- transports -----------------------------------------------------------------------------------


async def serve_stdio(server: Server) -> None:
    """Newline-delimited JSON-RPC; each request in its own task (a duplicate can overtake)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    caller = Caller(principal=f"local:{os.getuid() if hasattr(os, 'getuid') else 0}")
    tasks: set[asyncio.Task[None]] = set()

    async def one(line: str) -> None:
        answer = await server.handle(line, caller)
        if answer is not None:
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()

    while line := await reader.readline():
        if line.strip():
            task = asyncio.ensure_future(one(line.decode("utf-8", "surrogatepass")))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    for task in tasks:
        task.cancel()


Send = Callable[[dict[str, Any]], Awaitable[None]]


def asgi_app(server: Server, tokens: frozenset[str]) -> Callable[..., Awaitable[None]]:
    """Streamable HTTP at /mcp: POST a JSON-RPC message, get a JSON answer (202 for a
    notification). A bearer token is the caller; 2025-11-25 `initialize` opens a session."""

    async def respond(send: Send, status: int, body: str = "", **headers: str) -> None:
        raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
        if body:
            raw.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body.encode()})

    async def app(scope: dict[str, Any], receive: Any, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != "/mcp":
            return await respond(send, 404, _dumps({"error": "not found"}))
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        token = headers.get("authorization", "").removeprefix("Bearer ").strip()
        if token not in tokens:
            body = _dumps({"error": "invalid_token"})
            return await respond(send, 401, body, www_authenticate='Bearer error="invalid_token"')
        if scope["method"] == "DELETE":
            return await respond(send, 200)
        if scope["method"] != "POST":
            return await respond(send, 405, _dumps({"error": "POST only"}), allow="POST, DELETE")
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        text = b"".join(chunks).decode("utf-8", "surrogatepass")
        session = headers.get("mcp-session-id")
        client = scope.get("client") or ("?", 0)
        caller = Caller(f"bearer:{token}", session or f"tcp:{client[0]}:{client[1]}")
        answer = await server.handle(text, caller)
        if answer is None:
            return await respond(send, 202)
        extra: dict[str, str] = {}
        if _is_initialize(text):
            extra["mcp_session_id"] = uuid.uuid4().hex
        await respond(send, 200, answer, **extra)

    return app


def _is_initialize(text: str) -> bool:
    try:
        message = json.loads(text)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("method") == "initialize"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on 127.0.0.1")
    parser.add_argument("--tokens", default="alice,bob", help="accepted bearer tokens (HTTP)")
    parser.add_argument("--store", metavar="FILE", help="a SQLite file several instances share")
    parser.add_argument("--retention", type=float, default=600.0, metavar="SECONDS")
    parser.add_argument("--mutant", action="append", default=[], choices=sorted(MUTANTS))
    args = parser.parse_args(argv)
    from_env = [m for m in os.environ.get("SEP3182_REF_MUTANTS", "").split(",") if m]
    mutants = frozenset(args.mutant + from_env)

    def make() -> Server:  # inside the running loop
        return Server(mutants=mutants, retention=args.retention, store_path=args.store)

    if args.http is None:

        async def stdio() -> None:
            await serve_stdio(make())

        asyncio.run(stdio())
        return
    import uvicorn  # only HTTP needs it: stdio runs on the standard library alone

    tokens = frozenset(t for t in args.tokens.split(",") if t)

    async def http() -> None:
        server = make()
        config = uvicorn.Config(
            asgi_app(server, tokens),
            host="127.0.0.1",
            port=args.http,
            log_level="warning",
            lifespan="off",
        )
        await uvicorn.Server(config).serve()

    asyncio.run(http())


if __name__ == "__main__":
    main()
