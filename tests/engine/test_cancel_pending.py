"""`runtime.cancel_pending`: the adapters' cheap test before `checkpoint_if_cancelled`.

It must never say False where anyio's own checkpoint would cancel: a keyed call whose client
cancelled would then be answered a second time. Checked against anyio itself over nested
scopes, cancelled or shielded at every level, on asyncio; on trio it always defers to anyio.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import anyio
import anyio.lowlevel
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from idemtools.engine.runtime import cancel_pending
from tests.budget import examples

# Each level: (cancelled, shielded).
Levels = Sequence[tuple[bool, bool]]


async def _check(levels: Levels) -> tuple[bool, bool]:
    answers: list[tuple[bool, bool]] = []
    with contextlib.ExitStack() as stack:
        for cancelled, shield in levels:
            scope = stack.enter_context(anyio.CancelScope(shield=shield))
            if cancelled:
                scope.cancel()
        said = cancel_pending()
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            answers.append((said, True))
            raise
        answers.append((said, False))
    return answers[0] if answers else (True, True)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=6))
def test_true_exactly_when_anyio_would_cancel(levels: list[tuple[bool, bool]]) -> None:
    said, cancelled = anyio.run(_check, levels, backend="asyncio")
    assert said is cancelled


def test_no_scope_at_all_is_not_pending() -> None:
    async def main() -> bool:
        return cancel_pending()

    assert anyio.run(main, backend="asyncio") is False


def test_a_cancelled_scope_is_pending_and_a_shield_inside_it_is_not() -> None:
    async def main() -> tuple[bool | None, bool | None]:
        pending: bool | None = None
        shielded: bool | None = None
        with anyio.CancelScope() as outer:
            outer.cancel()
            pending = cancel_pending()
            with anyio.CancelScope(shield=True):
                shielded = cancel_pending()
                await anyio.lowlevel.checkpoint()  # shielded: not cancelled here
            await anyio.lowlevel.checkpoint()  # cancelled here, caught by `outer`
        assert outer.cancelled_caught
        return pending, shielded

    assert anyio.run(main, backend="asyncio") == (True, False)


def test_on_trio_it_defers_to_anyio() -> None:
    pytest.importorskip("trio")

    async def main() -> bool:
        return cancel_pending()

    assert anyio.run(main, backend="trio") is True
