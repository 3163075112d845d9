"""The public surface: `idemtools.__all__` and docstrings."""

from __future__ import annotations

import inspect

import pytest

import idemtools
import idemtools.stores

PUBLIC = sorted(idemtools.__all__)

# Names fixed as public API.
REQUIRED = {
    "idempotent",
    "by_auth_subject",
    "Registry",
    "default_registry",
    "canonicalize",
    "fingerprint",
}


def _isort_style(name: str) -> tuple[int, str]:
    # The order ruff's RUF022 enforces (the project lints with RUF): SCREAMING_CASE constants,
    # then CamelCase classes, then the rest, each group alphabetical.
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_sorted_and_unique() -> None:
    assert len(set(idemtools.__all__)) == len(idemtools.__all__)
    assert list(idemtools.__all__) == sorted(idemtools.__all__, key=_isort_style)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_name_in_all_exists(name: str) -> None:
    assert hasattr(idemtools, name), name


def test_required_names_are_public() -> None:
    assert set(idemtools.__all__) >= REQUIRED
    assert {"MemoryStore", "SQLiteStore", "Store"} <= set(idemtools.stores.__all__)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from idemtools import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(idemtools.__all__)


def _documentable(name: str) -> bool:
    obj = getattr(idemtools, name)
    return inspect.isclass(obj) or inspect.isfunction(obj) or callable(obj)


@pytest.mark.parametrize("name", [n for n in PUBLIC if _documentable(n)])
def test_public_callables_have_docstrings(name: str) -> None:
    obj = getattr(idemtools, name)
    if inspect.isclass(obj) or inspect.isfunction(obj):
        doc = obj.__doc__
    elif isinstance(obj, idemtools.Scope):
        # A Scope instance's __doc__ is the Scope class's; the strategy's own function must say
        # what it does.
        doc = obj._fn.__doc__
    else:
        doc = obj.__doc__ if obj.__doc__ != type(obj).__doc__ else None
    assert doc and doc.strip(), f"{name} has no docstring"


def test_package_is_typed() -> None:
    from pathlib import Path

    assert (Path(idemtools.__file__).parent / "py.typed").is_file()
