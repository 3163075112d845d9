"""A downstream module with deliberate misuses: mypy must report each marked line.

Each line ending in `# expect: <code>` must get exactly that error code from
`mypy --strict`, and no other line may get any (checked by tests/test_typing.py).
"""

from __future__ import annotations

from idemtools import OnOutcome, idempotent


@idempotent
def add(a: int, b: int) -> int:
    return a + b


@idempotent(retention=60)
async def charge(amount: int, currency: str = "EUR") -> int:
    return amount


async def misuse() -> None:
    add("1", 2)  # expect: arg-type
    await charge(amount="10")  # expect: arg-type
    label: str = add(1, 2)  # expect: assignment
    print(label)


def two_arguments(tool: str, kind: str) -> None:
    print(tool, kind)


hook: OnOutcome = two_arguments  # expect: assignment
