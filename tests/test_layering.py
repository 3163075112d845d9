"""The import rules of docs/architecture.md, read from the source.

Every `import` / `from ... import` counts: at module level, inside functions (a lazy import is
still a dependency, only a later one) and under `if TYPE_CHECKING:` (an annotation that needs a
module ties the two together as surely as a call). The graph itself is the one
`tests/server/adapters/test_import_graph.py` reads for circles; this file adds what that one
does not need: line numbers, third-party names, and the rules.

Each rule says which group of modules may import which; a failure names the offending import as
`path:line imports target`, so the fix (or the change to the rule, and to the note) is obvious.
One more rule is about faces: no module takes a name from the `__init__` of a package it is
inside (`face_imports`).
The table in docs/architecture.md ("What each part may import") is `MAY_IMPORT` below.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.server.adapters.test_import_graph import (
    ROOT,
    _module_name,
    _parents,
    _resolve,
    import_graph,
)

SDK = frozenset({"mcp", "mcp_types", "fastmcp"})
"""The MCP SDK's top-level packages (mcp 1.x `mcp`; mcp 2.x `mcp` and `mcp_types`; FastMCP 4)."""


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    line: int
    target: str  # an idemtools module (nearest one named), or a third-party top-level package
    lazy: bool = False  # inside a function: runs when the function does

    @property
    def where(self) -> str:
        path = Path(*self.module.split("."))
        init = ROOT.parent / path / "__init__.py"
        return f"{'/'.join(path.parts)}{'/__init__' if init.exists() else ''}.py:{self.line}"

    def __str__(self) -> str:
        return f"{self.where} imports {self.target}"


def imports() -> list[Import]:
    """Every import in the package, resolved as `import_graph` resolves it (standard library
    left out: it is no dependency any rule is about)."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    found: list[Import] = []
    for name, path in sorted(modules.items()):
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_functions = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
            for node in ast.walk(function)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            else:
                continue
            lazy = id(node) in in_functions
            for target in targets:
                if target == "idemtools" or target.startswith("idemtools."):
                    while target not in modules:
                        target = target.rpartition(".")[0]
                    if target != name:
                        found.append(Import(name, node.lineno, target, lazy))
                else:
                    top = target.split(".")[0]
                    if top not in sys.stdlib_module_names and top != "__future__":
                        found.append(Import(name, node.lineno, top, lazy))
    return found


# -- the groups of the house (docs/architecture.md, "The house") -----------------------------------

# The package root holds the contract's vocabulary: one concept a module, no folder of its own.
_FOUNDATION = {"errors", "canonical", "redaction", "outcome", "scopes", "policy", "bridges"}
# Every other group is a folder of the package, named as the folder is.
_FOLDERS = {
    "_sdk",
    "engine",
    "server",
    "client",
    "cli",
    "docs",
    "testing",
    "proxy",
    "integrations",
}
_SDK_FREE_ADAPTER_PARTS = {"_adapted", "_auth", "_contact", "_serving"}


def group(module: str) -> str:
    """The group of the house a module belongs to: its folder, or "foundation" at the root."""
    parts = module.split(".")[1:]
    if not parts:
        return "facade"
    head = parts[0]
    if head in _FOUNDATION:
        return "foundation"
    if head == "stores":
        return "stores.base" if parts[1:] == ["base"] else "stores"
    if head == "conformance":
        return "conformance.server" if parts[1:] == ["_server_fixtures"] else "conformance"
    if head in _FOLDERS:
        return head
    return f"unplaced: {module}"  # a new module: give it a group here and a row in the note


MAY_IMPORT: dict[str, set[str]] = {
    "foundation": set(),
    "_sdk": set(),  # which SDK line, the key's field, the patch record: shared by both sides
    "stores.base": {"foundation"},
    "stores": {"stores.base", "foundation"},
    "engine": {"stores.base", "foundation"},  # the lease keeper and telemetry are its own
    "server": {"engine", "stores.base", "stores", "_sdk", "foundation"},
    "client": {"_sdk", "foundation"},  # no engine, no server: a client loads no server code
    "docs": {"server", "stores.base", "foundation"},
    "conformance": {"conformance.server"},  # add_fixture_tools only, lazily (see its rule)
    "conformance.server": {"conformance", "server", "_sdk", "foundation"},
    "testing": {"server", "client", "_sdk", "foundation"},
    "proxy": {"engine", "stores", "stores.base", "docs", "foundation"},  # raw JSON-RPC: no SDK
    "integrations": {"client", "foundation"},  # client side only: never the engine or a store
}
"""Group → the other groups its modules may import (within a group anything goes, but for
the circles `test_import_graph` forbids). Groups absent here (the `idemtools` façade and the
command line, `cli/`) stand on top and may import anything."""


def may_import_sdk(module: str) -> bool:
    """Only the edges touch the SDK: the server's adapters (not their SDK-free shared parts),
    the client's two SDK halves, the in-process test helper and the conformance kit's server
    side."""
    parts = module.split(".")[1:]
    if parts[:2] == ["server", "adapters"]:
        return len(parts) == 3 and parts[2] not in _SDK_FREE_ADAPTER_PARTS
    if parts[:1] == ["client"]:
        return parts[1:] in (["sdk_mcp1"], ["sdk_mcp2"])
    # integrations: the client frameworks' edge (FastMCP's Client, pydantic-ai on it).
    return group(module) in ("testing", "conformance.server", "integrations")


# -- the checks, as functions of an import list (so that a planted violation can be shown) -------


def outside_the_table(found: Iterable[Import]) -> list[str]:
    bad = []
    for imp in found:
        if not imp.target.startswith("idemtools"):
            continue
        mine, theirs = group(imp.module), group(imp.target)
        allowed = MAY_IMPORT.get(mine)
        if allowed is not None and theirs != mine and theirs not in allowed:
            bad.append(f"{imp} ({mine} may not import {theirs})")
    return bad


def sdk_outside_the_edges(found: Iterable[Import]) -> list[str]:
    return [
        f"{imp} (only server/adapters/, client/sdk_mcp*.py, the client integrations, "
        "testing/ and conformance/_server_fixtures.py import the SDK)"
        for imp in found
        if imp.target in SDK and not may_import_sdk(imp.module)
    ]


def engine_violations(found: Iterable[Import]) -> list[str]:
    bad = []
    for imp in found:
        if group(imp.module) != "engine":
            continue
        target = imp.target
        if target in SDK:
            bad.append(f"{imp} (the engine imports no SDK)")
        elif group(target) == "stores":
            bad.append(f"{imp} (the engine knows stores by their protocol: stores.base only)")
        elif group(target) in ("server", "client", "testing", "_sdk"):
            bad.append(f"{imp} (the engine imports nothing that knows an SDK)")
    return bad


def store_violations(found: Iterable[Import]) -> list[str]:
    bad = []
    for imp in found:
        if group(imp.module) not in ("stores", "stores.base"):
            continue
        target = imp.target
        ours = target.startswith("idemtools")
        if target in SDK or (ours and group(target) not in ("stores", "stores.base", "foundation")):
            bad.append(f"{imp} (stores are leaves: no engine, adapter or SDK)")
    return bad


_SERVER_SIDE = "idemtools.conformance._server_fixtures"


def conformance_violations(found: Iterable[Import]) -> list[str]:
    """The black-box kit imports nothing of idemtools outside `conformance/`, and no SDK; its
    one way to the server side is `add_fixture_tools`' lazy import, inside the function."""
    bad = []
    for imp in found:
        if group(imp.module) != "conformance":
            continue
        target = imp.target
        if target == _SERVER_SIDE:
            if imp.module != "idemtools.conformance" or not imp.lazy:
                bad.append(f"{imp} (only add_fixture_tools reaches the server side, lazily)")
        elif target in SDK or (target.startswith("idemtools") and group(target) != "conformance"):
            bad.append(f"{imp} (the conformance kit is a black box: it imports no engine)")
    return bad


@dataclass(frozen=True)
class FaceImport:
    """A name a module takes from the `__init__` (the face) of a package it is inside."""

    module: str
    line: int
    face: str  # the package whose `__init__` it reads
    name: str

    def __str__(self) -> str:
        where = Import(self.module, self.line, self.face).where
        return f"{where} takes {self.name} from the face of {self.face}"


def sources() -> dict[str, tuple[bool, str]]:
    """Every module of the package → (is it a package's `__init__`, its source)."""
    return {
        _module_name(p): (p.name == "__init__.py", p.read_text(encoding="utf-8"))
        for p in ROOT.rglob("*.py")
    }


def face_imports(found: Mapping[str, tuple[bool, str]]) -> list[FaceImport]:
    """Every `from . import X` / `from idemtools.pkg import X` (any number of dots) by which a
    module takes a name that is not a submodule from the face of its own package or of one
    enclosing it. Module level, inside functions and under `TYPE_CHECKING` alike: the import
    graph leaves parent packages out (importing `a.b.c` runs `a` and `a.b` first), so an arrow
    up to a face would hide a circle from `test_import_graph` and tie the part to whatever its
    face gathers."""
    bad: list[FaceImport] = []
    for name, (is_package, text) in sorted(found.items()):
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(name, is_package, node)
            if base not in _parents(name):
                continue  # not a package this module is inside (its own face, for an __init__)
            bad.extend(
                FaceImport(name, node.lineno, base, alias.name)
                for alias in node.names
                if f"{base}.{alias.name}" not in found
            )
    return bad


FACE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
"""(module, name) → why it still reads its package's face. Every entry must still be needed."""


def reachable(start: str, graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module → the import chain that reaches it from `start` (a package's own parents left
    out: every module's import runs `idemtools/__init__`, the façade, first)."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        here = todo.pop()
        for nxt in sorted(graph.get(here, ())):
            if nxt not in chains and nxt not in _parents(here):
                chains[nxt] = [*chains[here], nxt]
                todo.append(nxt)
    return chains


# -- the rules -------------------------------------------------------------------------------


def test_the_imports_are_read() -> None:
    found = {(i.module, i.target) for i in imports()}
    assert ("idemtools.server.adapters.mcp2", "mcp") in found  # module level, third party
    assert ("idemtools.server.adapters.mcp2", "mcp_types") in found
    assert (
        "idemtools.server.installation",
        "idemtools.server.adapters",
    ) in found  # inside install()
    assert ("idemtools.engine.core", "opentelemetry") in found  # under TYPE_CHECKING
    assert ("idemtools.engine.decision", "idemtools.stores.base") in found


def test_every_module_has_a_place_in_the_table() -> None:
    groups = {group(m) for m in import_graph()}
    unplaced = sorted(g for g in groups if g.startswith("unplaced"))
    assert not unplaced, "add to `group` and to docs/architecture.md: " + ", ".join(unplaced)
    assert groups - set(MAY_IMPORT) == {"facade", "cli"}


def test_a_bad_import_would_be_found() -> None:
    planted = [
        Import("idemtools.engine.core", 1, "mcp"),
        Import("idemtools.engine.core", 2, "idemtools.stores.memory"),
        Import("idemtools.engine.core", 3, "idemtools.server.adapters.mcp2"),
        Import("idemtools.stores.redis", 4, "idemtools.engine.decision"),
        Import("idemtools.stores.redis", 5, "mcp"),
        Import("idemtools.scopes", 6, "mcp"),
        Import("idemtools.conformance.checks", 7, "idemtools.engine"),
        Import("idemtools.conformance.checks", 8, "idemtools.conformance._server_fixtures"),
        Import("idemtools.server.adapters._contact", 9, "mcp"),
    ]
    assert len(engine_violations(planted)) == 3
    assert len(store_violations(planted)) == 2
    assert len(sdk_outside_the_edges(planted)) == 4  # engine, store, scopes, _contact
    assert len(conformance_violations(planted)) == 2
    lazy = [Import("idemtools.conformance", 1, "idemtools.conformance._server_fixtures", True)]
    assert conformance_violations(lazy) == []
    eager = [Import("idemtools.conformance", 1, "idemtools.conformance._server_fixtures")]
    assert len(conformance_violations(eager)) == 1
    table = outside_the_table(planted)
    assert "idemtools/engine/core.py:2 imports idemtools.stores.memory" in table[0]
    assert "(engine may not import stores)" in table[0]
    # What the engine is allowed stays allowed.
    fine = [Import("idemtools.engine.decision", 1, "idemtools.stores.base")]
    assert engine_violations(fine) == outside_the_table(fine) == []


def test_a_face_import_would_be_found() -> None:
    planted = {
        "idemtools": (True, ""),
        "idemtools.pkg": (True, "from .a import Thing\n"),
        "idemtools.pkg.a": (
            False,
            "from typing import TYPE_CHECKING\n"
            "from . import b\n"  # a submodule: fine
            "from .b import helper\n"  # the defining module: fine
            "from idemtools.pkg.b import other\n"  # the same, absolute: fine
            "from . import Thing\n"  # 5: the face, relative
            "if TYPE_CHECKING:\n"
            "    from idemtools.pkg import Other\n",  # 7: the face, absolute, for typing only
        ),
        "idemtools.pkg.b": (False, "def f():\n    from .. import Policy\n"),  # an outer face
        "idemtools.pkg.sub": (True, "from .. import Thing\n"),  # a subpackage: its parent's
    }
    found = [(f.module, f.line, f.face, f.name) for f in face_imports(planted)]
    assert found == [
        ("idemtools.pkg.a", 5, "idemtools.pkg", "Thing"),
        ("idemtools.pkg.a", 7, "idemtools.pkg", "Other"),
        ("idemtools.pkg.b", 2, "idemtools", "Policy"),
        ("idemtools.pkg.sub", 1, "idemtools.pkg", "Thing"),
    ]
    assert str(face_imports(planted)[0]) == (
        "idemtools/pkg/a.py:5 takes Thing from the face of idemtools.pkg"
    )


def test_no_module_imports_the_face_of_its_own_package() -> None:
    found = face_imports(sources())
    bad = [str(f) for f in found if (f.module, f.name) not in FACE_IMPORTS_ALLOWED]
    assert not bad, "import from the module that defines the name:\n" + "\n".join(bad)
    stale = set(FACE_IMPORTS_ALLOWED) - {(f.module, f.name) for f in found}
    assert not stale, f"no longer needed, remove from FACE_IMPORTS_ALLOWED: {sorted(stale)}"


def test_the_engine_imports_no_sdk_no_store_implementation_and_no_adapter() -> None:
    bad = engine_violations(imports())
    assert not bad, "\n".join(bad)


def test_nothing_the_engine_reaches_imports_an_sdk_a_store_or_an_adapter() -> None:
    graph = import_graph()
    sdk_users = {i.module: i for i in imports() if i.target in SDK}
    bad: dict[str, list[str]] = {}  # what is reached → the shortest chain that reaches it
    for start in sorted(m for m in graph if group(m) == "engine"):
        for reached, chain in reachable(start, graph).items():
            wrong = group(reached) in ("stores", "server", "client", "testing", "_sdk")
            if (wrong or reached in sdk_users) and len(chain) < len(bad.get(reached, [*chain, ""])):
                bad[reached] = chain
    shown = [
        " -> ".join(chain) + (f" ({sdk_users[end]})" if end in sdk_users else "")
        for end, chain in sorted(bad.items())
    ]
    assert not bad, "the engine reaches:\n" + "\n".join(shown)


def test_stores_import_no_engine_no_adapter_and_no_sdk() -> None:
    bad = store_violations(imports())
    assert not bad, "\n".join(bad)


def test_only_the_edges_import_the_sdk() -> None:
    bad = sdk_outside_the_edges(imports())
    assert not bad, "\n".join(bad)


def test_the_conformance_kit_imports_no_engine() -> None:
    bad = conformance_violations(imports())
    assert not bad, "\n".join(bad)


def test_every_import_fits_the_table() -> None:
    bad = outside_the_table(imports())
    assert not bad, "\n".join(bad)


def test_importing_the_core_loads_no_sdk() -> None:
    """What the source says, checked once at run time: the façade, the engine, the stores, the
    docs generator and the conformance kit load no SDK module (a fresh interpreter: this test
    process has the SDK loaded already)."""
    modules = (
        "idemtools",
        "idemtools.engine",
        "idemtools.stores.memory",
        "idemtools.stores.sqlite",
        "idemtools.stores.reference",
        "idemtools.docs",
        "idemtools.conformance.cli",
        "idemtools.cli.keys",
    )
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(SDK)!r}))\n"
        + "print(sorted(n for n in sys.modules if n.startswith('idemtools.server.adapters')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["[]", "[]"], f"SDK modules loaded: {out[0]}; adapters loaded: {out[1]}"
