"""What both sides share of the SDK: which line is installed, the key's field, the patch record.

The line is detected by what it ships (`mcp_types` exists only on 2.x), never by parsing
version strings. `fields` declares `idempotencyKey` on SDK models and `registry` records every
SDK change; neither imports `mcp`. A leaf of its own so that the client side uses them without
loading the server's adapters, and no adapter imports its package's face for them.
"""

from __future__ import annotations

import importlib.util

__all__ = ["SDK2", "sdk_line"]


def sdk_line() -> int:
    """The installed mcp SDK's major line (1 or 2): only the 2.x line ships `mcp_types`."""
    return 2 if importlib.util.find_spec("mcp_types") is not None else 1


SDK2 = sdk_line() == 2
"""mypy checks one SDK line per run: `--always-true SDK2` on 2.x, `--always-false SDK2` on 1.x."""
