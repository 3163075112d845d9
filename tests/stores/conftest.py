"""Store tests: the shared conformance suite lives in `conformance.py`, one subclass per store."""

from __future__ import annotations

import pytest

# conformance.py is not a test module, so pytest would not rewrite its asserts by itself.
pytest.register_assert_rewrite("tests.stores.conformance")
