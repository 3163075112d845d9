"""A downstream module: must pass `mypy --strict` (checked by tests/test_typing.py).

`@idempotent` must hand back the decorated function with its signature intact, bare or with
options, sync or async, so every call and assignment below type-checks as if it were absent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from idemtools import (
    CallContext,
    OnOutcome,
    OutcomeContext,
    Registry,
    by_auth_subject,
    idempotent,
    per_session,
    shared,
)
from idemtools.engine.telemetry import OutcomeKind

registry = Registry()


def by_tenant(ctx: CallContext) -> str:
    return "tenant"


@idempotent
def add(a: int, b: int) -> int:
    return a + b


@idempotent(retention=timedelta(hours=1), lease=30, scope=shared, name="mul", registry=registry)
def multiply(a: int, b: int = 2) -> int:
    return a * b


@idempotent
async def fetch(url: str, *, retries: int = 3) -> bytes:
    return url.encode() * retries


@idempotent(scope=by_auth_subject | per_session, lease=timedelta(seconds=5))
async def charge(amount: int, currency: str = "EUR") -> dict[str, int]:
    return {currency: amount}


@idempotent(scope=by_tenant, transactional=True)
def with_plain_scope(text: str, *tags: str, **extra: float) -> list[str]:
    return [text, *tags, *map(str, extra.values())]


class Service:
    @idempotent(name="service.refund")
    def refund(self, order: str) -> bool:
        return bool(order)


def sync_callers() -> None:
    total: int = add(1, 2)
    product: int = multiply(3)
    product = multiply(3, b=4)
    words: list[str] = with_plain_scope("a", "b", "c", weight=1.5)
    refunded: bool = Service().refund("o-1")
    as_callable: Callable[[int, int], int] = add
    print(total, product, words, refunded, as_callable)


async def async_callers() -> None:
    data: bytes = await fetch("https://example.org", retries=1)
    receipt: dict[str, int] = await charge(10)
    pending: Awaitable[dict[str, int]] = charge(5, currency="USD")
    receipt = await pending
    as_callable: Callable[[str], Awaitable[bytes]] = fetch
    print(data, receipt, as_callable)


# The on_outcome hook: plain functions and coroutine functions, whatever their parameter names.
def count_outcome(tool: str, kind: OutcomeKind, context: OutcomeContext) -> None:
    print(tool, kind, context.key_digest, context.outcome)


async def publish_outcome(name: str, what: str, ctx: OutcomeContext) -> None:
    print(name, what, ctx.refusal)


sync_hook: OnOutcome = count_outcome
async_hook: OnOutcome = publish_outcome
