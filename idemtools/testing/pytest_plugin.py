"""pytest plugin (entry point `pytest11`): the `assert_protected` fixture.

Loaded by pytest in every project where idemtools is installed, so it does nothing at import
beyond defining the fixture: no SDK import, no field declared on SDK models, no hook. The
check itself is imported when a test asks for the fixture.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def assert_protected() -> Any:
    """`await assert_protected(server, tool, arguments)`: `idemtools.testing.assert_protected`.

    Fails the test with `NotProtectedError` when a keyed retry of `tool` would run twice
    (e.g. `idemtools.install(server)` was forgotten). Needs an async test (pytest-asyncio or
    anyio's pytest plugin).
    """
    from .assertions import assert_protected as check

    return check
