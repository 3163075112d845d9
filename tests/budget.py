"""How many examples a property test draws on this run.

The full count on the run that covers everything once (the README's command); a tenth (at
least 10) where `IDEMTOOLS_EXAMPLES=fewer`, which CI sets on the legs that repeat the same
tests under other Python and mcp releases: there the point is that the code runs on that
Python, not a second search of the same input space.
"""

from __future__ import annotations

import os

FEWER = os.environ.get("IDEMTOOLS_EXAMPLES") == "fewer"


def examples(n: int) -> int:
    """`n`, or a tenth of it (at least 10, never more than `n`) on the repeating legs."""
    return min(n, max(10, n // 10)) if FEWER else n
