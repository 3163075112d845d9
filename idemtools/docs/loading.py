"""Finding the server to document from a `module:attribute` reference (the CLI's and the
mkdocs plugin's way in): import it, fresh when asked, and check idemtools is installed on it.

Every failure is a `DocsError` with a one-line message that says what to do, because the
reader is at a terminal or in a docs build log, not in a debugger.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
from types import ModuleType
from typing import Any

from ..server.installation import installation_of
from .errors import NotInstalledError, ServerImportError, SpecError, not_installed

__all__ = ["load_server", "module_file", "parse_spec"]

_SPEC = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)$")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `"package.module:attribute"` (attribute may be dotted) or raise `SpecError`."""
    found = _SPEC.match(spec.strip())
    if found is None:
        raise SpecError(
            f"{spec!r} is not a server reference: expected 'module:attribute', "
            "e.g. 'myapp.server:server'"
        )
    return found.group(1), found.group(2)


def _import_fresh(name: str) -> ModuleType:
    """Import `name` anew, from source, even if it is already in `sys.modules`.

    `mkdocs serve` rebuilds in the same process, so a plain import would keep documenting
    the first version of the server. Compiling the source ourselves also avoids a stale
    `.pyc` when an edit keeps the file's size and lands within the same second.
    """
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = spec.loader
    if not isinstance(loader, importlib.machinery.SourceFileLoader) or spec.origin is None:
        return importlib.import_module(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        source = loader.get_source(name) or ""
        code = compile(source, spec.origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_server(spec: str, *, fresh: bool = False) -> Any:
    """Import the server named by `"module:attribute"` and check idemtools is installed on it.

    Args:
        fresh: import the module anew even if already imported (for rebuilds in one process).

    Raises:
        SpecError: `spec` is not `module:attribute`.
        ServerImportError: the module does not import, or lacks the attribute.
        NotInstalledError: the object has no idemtools `Installation`.
    """
    module_name, attribute = parse_spec(spec)
    try:
        module = _import_fresh(module_name) if fresh else importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ServerImportError(
                f"cannot import {module_name!r}: no module named {missing!r} "
                "(run from your project directory, or add it to PYTHONPATH)"
            ) from exc
        raise ServerImportError(
            f"cannot import {module_name!r}: it needs {missing!r}, which is not installed"
        ) from exc
    except SystemExit as exc:
        raise ServerImportError(
            f"cannot import {module_name!r}: it exited while being imported (code {exc.code!r}); "
            "start the server under `if __name__ == '__main__':`"
        ) from exc
    except Exception as exc:
        raise ServerImportError(
            f"cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ServerImportError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if installation_of(target) is None:
        raise NotInstalledError(not_installed(spec, target))
    return target


def module_file(spec: str) -> str | None:
    """The source file of the module a spec names, if it has one (for `mkdocs serve` to watch)."""
    module_name, _ = parse_spec(spec)
    module = sys.modules.get(module_name)
    origin = getattr(module, "__file__", None)
    return origin if isinstance(origin, str) else None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 300 else text[:297] + "..."
