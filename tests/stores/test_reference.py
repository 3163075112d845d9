"""ReferenceStore (the executable spec) against the suite, and MemoryStore against it.

MemoryStore packs records into bytes and keeps them in one dict with a heap of expiries: an
optimisation of the reference's dict and clock. Here it must give the reference's answers,
operation by operation, on random sequences of claims, renewals, completions, releases, reads
and time passing, with bounds on and off; claims kept as lapsed claims, released to lapsed,
sent twice by their owner, and replaceable completions.
"""

from __future__ import annotations

import random
from collections.abc import Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.errors import QuotaExceededError, StoreFullError
from idemtools.stores.base import FullStore, LapsingStore, Status
from idemtools.stores.memory import MemoryStore
from idemtools.stores.reference import ReferenceStore
from tests.budget import examples

from .conformance import FakeClock, StoreConformance


class TestReferenceStore(StoreConformance):
    async def make_store(
        self,
        clock: FakeClock,
        *,
        max_records: int | None = None,
        max_bytes: int | None = None,
        max_records_per_scope: int | None = None,
    ) -> LapsingStore:
        if max_bytes is not None:
            pytest.skip("the reference store counts records, not bytes")
        return ReferenceStore(
            clock=clock, max_records=max_records, max_records_per_scope=max_records_per_scope
        )


def test_reference_store_is_a_full_store() -> None:
    assert isinstance(ReferenceStore(), FullStore)


# -- MemoryStore as an optimisation of the reference ------------------------------------------

_SCOPES = ["a" * 64, "0123456789abcdef" * 4, "a\x1fb", "plain"]  # packed and unpacked ids
_KEYS = ["k1", "k2", "k3", "\x00", "x\ud800y"]
_FPS = ["f" * 64, "e" * 64, "fp-not-hex"]
_OUTCOMES = [b'{"v":1,"result":{}}', b'{"v":1,"error":{"code":1}}', bytes(range(256))]

_KEEP = 15.0  # what "claim-keep" and "claim-again" keep a lapsed claim for

_CLAIM = st.tuples(
    st.sampled_from(["claim", "claim-keep"]),
    st.integers(0, len(_SCOPES) - 1),
    st.integers(0, len(_KEYS) - 1),
    st.integers(0, len(_FPS) - 1),
    st.sampled_from([1.0, 10.0, 30.0]),  # lease
)
_ACT = st.tuples(
    st.sampled_from(
        [
            "renew",
            "complete",
            "complete-nofp",
            "complete-replaceable",
            "release",
            "release-lapse",
            "claim-again",
            "get",
        ]
    ),
    st.integers(0, len(_SCOPES) - 1),
    st.integers(0, len(_KEYS) - 1),
    st.integers(0, 7),  # whose: a recent claim's owner (on its own key when even), 7 an intruder
    st.sampled_from([1.0, 10.0, 60.0]),  # lease or retention
)
_ADVANCE = st.tuples(
    st.just("advance"), st.just(0), st.just(0), st.just(0), st.sampled_from([0.5, 1.0, 10.0])
)
_OP = st.one_of(_CLAIM, _ACT, _ACT, _ADVANCE)  # twice as many acts as claims


def _run(coro: Any) -> Any:
    # Neither store's operations ever suspend: drive them without an event loop.
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a store operation suspended")


def _answer(coro: Any) -> Any:
    """What an operation answered: its value, or the refusal it raised (by kind; the words
    name the store)."""
    try:
        return _run(coro)
    except QuotaExceededError as exc:
        return ("quota", str(exc))
    except StoreFullError:
        return ("full",)


def _left_open(reference: ReferenceStore, scope: str, key: str, owner: str, fp: str | None) -> bool:
    """A completion whose answer the spec leaves to the store: a claim whose lease ran out is
    still known to one store and may be gone from another (MemoryStore drops it on a later
    claim), so a late completion by someone else, or without a fingerprint, may go either way
    (base.py: "without it a store may refuse such a late completion")."""
    entry = reference._records.get((scope, key))
    return (
        entry is not None
        and entry.status is Status.IN_PROGRESS
        and entry.expires <= reference._clock()
        and (entry.owner != owner or fp is None)
    )


def differ(
    ops: list[tuple[str, int, int, int, float]],
    *,
    max_records: int | None,
    quota: int | None,
    optimised: type[MemoryStore] = MemoryStore,
) -> None:
    """Run `ops` on a ReferenceStore and on an `optimised` store with the same bounds and
    clock; assert every answer, and afterwards every key's record, is the same."""
    clock = FakeClock()
    reference = ReferenceStore(clock=clock, max_records=max_records, max_records_per_scope=quota)
    memory = optimised(
        clock=clock,
        max_records=max_records or 100_000,
        max_bytes=1 << 40,
        max_records_per_scope=quota,
        max_bytes_per_scope=None,
    )
    calls: list[Coroutine[Any, Any, Any]]
    claimed: list[tuple[str, str, str, str]] = []  # (owner, fingerprint, scope, key)
    trace: list[str] = []
    for op, s, k, n, seconds in ops:
        scope, key = _SCOPES[s], _KEYS[k]
        trace.append(f"{op} {s} {k} {n} {seconds}")
        if op == "advance":
            clock.advance(seconds)
            continue
        if op in ("claim", "claim-keep"):
            owner = f"{len(trace):032x}" if len(trace) % 3 else f"owner-{len(trace)}"
            made = (owner, _FPS[n], scope, key)
            keep = _KEEP if op == "claim-keep" else 0.0
            calls = [
                s.claim(scope, key, _FPS[n], owner, seconds, keep_lapsed=keep)
                for s in (reference, memory)
            ]
        else:
            # Mostly a recent claim's own owner on its own key; else that owner (or an
            # intruder) on whichever key the op names.
            if n < 7 and n // 2 < len(claimed):
                owner, fp, own_scope, own_key = claimed[-1 - n // 2]
                if n % 2 == 0:
                    scope, key = own_scope, own_key
            else:
                owner, fp = "intruder", _FPS[0]
            if op == "renew":
                calls = [s.renew(scope, key, owner, seconds) for s in (reference, memory)]
            elif op in ("release", "release-lapse"):
                lapse = op == "release-lapse"
                calls = [s.release(scope, key, owner, lapse=lapse) for s in (reference, memory)]
            elif op == "claim-again":  # the owner's claim sent again (or a new one of its)
                calls = [
                    s.claim(scope, key, fp, owner, seconds, keep_lapsed=_KEEP)
                    for s in (reference, memory)
                ]
            elif op == "get":
                calls = [s.get(scope, key) for s in (reference, memory)]
            else:
                given_fp = None if op == "complete-nofp" else fp
                if _left_open(reference, scope, key, owner, given_fp):
                    trace[-1] += " (left open: skipped)"
                    continue
                outcome = _OUTCOMES[n % len(_OUTCOMES)]
                replaceable = op == "complete-replaceable"
                calls = [
                    s.complete(
                        scope,
                        key,
                        owner,
                        outcome,
                        seconds,
                        fingerprint=given_fp,
                        replaceable=replaceable,
                    )
                    for s in (reference, memory)
                ]
        expected, got = (_answer(c) for c in calls)
        assert got == expected, "\n".join(trace)
        if op in ("claim", "claim-keep") and getattr(expected, "claimed", False):
            claimed.append(made)
        # Every key read back agrees too, not only the one operated on.
        for sc in _SCOPES:
            for ky in _KEYS:
                assert _run(memory.get(sc, ky)) == _run(reference.get(sc, ky)), "\n".join(trace)


_OPS = st.lists(_OP, max_size=80)


@settings(max_examples=examples(300), deadline=None)
@given(ops=_OPS)
def test_memory_store_answers_as_the_reference(ops: list[tuple[str, int, int, int, float]]) -> None:
    differ(ops, max_records=None, quota=None)


@settings(max_examples=examples(300), deadline=None)
@given(ops=_OPS, max_records=st.sampled_from([None, 3, 6]), quota=st.sampled_from([None, 1, 2]))
def test_memory_store_refuses_as_the_reference(
    ops: list[tuple[str, int, int, int, float]], max_records: int | None, quota: int | None
) -> None:
    differ(ops, max_records=max_records, quota=quota)


def _random_ops(rng: random.Random, n: int) -> list[tuple[str, int, int, int, float]]:
    """`n` operations drawn evenly (hypothesis favours small, simple cases; this does not)."""
    ops: list[tuple[str, int, int, int, float]] = []
    for _ in range(n):
        what = rng.choice(["claim", "act", "act", "advance"])
        s, k = rng.randrange(len(_SCOPES)), rng.randrange(2)  # two keys: they meet often
        if what == "claim":
            claim = rng.choice(["claim", "claim-keep"])
            ops.append((claim, s, k, rng.randrange(len(_FPS)), rng.choice([1.0, 10.0, 30.0])))
        elif what == "act":
            act = rng.choice(
                [
                    "renew",
                    "complete",
                    "complete-nofp",
                    "complete-replaceable",
                    "release",
                    "release-lapse",
                    "claim-again",
                    "get",
                ]
            )
            ops.append((act, s, k, rng.randrange(8), rng.choice([1.0, 10.0, 60.0])))
        else:
            ops.append(("advance", 0, 0, 0, rng.choice([0.5, 1.0, 10.0])))
    return ops


@pytest.mark.parametrize("seed", range(40))
def test_memory_store_answers_as_the_reference_on_long_runs(seed: int) -> None:
    rng = random.Random(seed)
    differ(
        _random_ops(rng, 400),
        max_records=rng.choice([None, 4, 8]),
        quota=rng.choice([None, 1, 2]),
    )


def test_the_comparison_can_fail() -> None:
    """A store that forgets to fence (renews anyone's claim) is caught by `differ`."""

    class Unfenced(MemoryStore):
        async def renew(self, scope: str, key: str, owner: str, lease: float) -> bool:
            return True

    with pytest.raises(AssertionError):
        differ(
            [("claim", 0, 0, 0, 5.0), ("renew", 0, 0, 7, 1.0)],
            max_records=None,
            quota=None,
            optimised=Unfenced,
        )
