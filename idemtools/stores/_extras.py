"""Name the pip extra when an optional store driver is missing.

Why: `ModuleNotFoundError: No module named 'redis'` does not say that idemtools packages the
driver as an extra, nor which one; the user should read the command that fixes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def require_extra(extra: str, feature: str) -> Iterator[None]:
    """Re-raise a driver's ModuleNotFoundError with the `pip install 'idemtools[extra]'` fix.

    Still a `ModuleNotFoundError` (an `ImportError`), with the missing module's `name`, so code
    that catches either keeps working; the driver's own error stays chained.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or "its driver"
        raise ModuleNotFoundError(
            f"idemtools' {feature} needs the {missing!r} package, which is an optional extra: "
            f"pip install 'idemtools[{extra}]' (from a checkout, until a release is on the "
            f"package index: pip install -e '/path/to/idemtools[{extra}]')",
            name=exc.name,
        ) from exc
