"""Store tests: the shared conformance suite lives in `conformance.py`, one subclass per store."""

from __future__ import annotations

# conformance.py is not a test module: tests/conftest.py has pytest rewrite its asserts (there,
# because the engine's tests import its fixtures before this folder is collected).
