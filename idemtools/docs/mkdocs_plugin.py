"""mkdocs plugin `idemtools`: a retention page generated from the servers' real policies.

    plugins:
      - search
      - idemtools:
          servers: [myapp.server:server]     # module:attribute, one or more
          page: retention.md                 # where the page appears (default)
          title: Idempotency and retention   # its heading (default)

The page is a virtual file: nothing is written into docs/, so it can never go stale in git.
Each build imports the server modules anew, and `mkdocs serve` watches their Python files (not
the SQLite store or the log a running server writes beside them), so editing
`@idempotent(retention=...)` refreshes the page in the browser. A server that cannot be loaded
stops the build with a `PluginError` naming the reference and the reason: a documentation site
must not publish a retention promise it could not read from the code.

Modules are imported relative to the directory of `mkdocs.yml` (the project root, usually), as
`python -m` would from there.
"""

from __future__ import annotations

import functools
import os
import posixpath
import sys
from typing import Any

import anyio
from mkdocs.config import base
from mkdocs.config import config_options as c
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.plugins import BasePlugin
from mkdocs.structure.files import File, Files

from .errors import DocsError
from .loading import load_server, module_file, parse_spec
from .model import ServerDoc, describe
from .render import render_page

__all__ = ["IdemtoolsPlugin", "IdemtoolsPluginConfig"]


# mkdocs does not annotate its `__init_subclass__` hooks; nothing to check on our side.
class IdemtoolsPluginConfig(base.Config):  # type: ignore[no-untyped-call]
    """The plugin's options in `mkdocs.yml`."""

    servers = c.ListOfItems(c.Type(str), default=[])
    """Servers to document, as `module:attribute`; each must have idemtools installed."""
    page = c.Type(str, default="retention.md")
    """Path of the generated page inside the site, like a file under docs/."""
    title = c.Type(str, default="Idempotency and retention")
    """The page's heading (and so its title in the navigation)."""


class IdemtoolsPlugin(BasePlugin[IdemtoolsPluginConfig]):  # type: ignore[no-untyped-call]
    """Adds the generated retention page; see the module docstring for the options."""

    def __init__(self) -> None:
        super().__init__()
        self._watched: list[str] = []

    def on_config(self, config: MkDocsConfig) -> MkDocsConfig | None:
        """Check the options before any import, so a typo fails fast with a clear message."""
        if not self.config.servers:
            raise PluginError(
                "idemtools plugin: 'servers' is empty; list at least one server as "
                "'module:attribute', e.g. servers: [myapp.server:server]"
            )
        for spec in self.config.servers:
            try:
                parse_spec(spec)
            except DocsError as exc:
                raise PluginError(f"idemtools plugin: servers: {exc}") from None
        page = self.config.page
        normal = posixpath.normpath(page)
        if not page.endswith(".md") or normal.startswith(("../", "/")) or normal == "..":
            raise PluginError(
                f"idemtools plugin: page {page!r} must be a relative path ending in '.md', "
                "inside the docs directory, e.g. 'retention.md'"
            )
        root = os.path.dirname(os.path.abspath(config.config_file_path or "mkdocs.yml"))
        if root not in sys.path:
            sys.path.insert(0, root)
        return config

    def on_files(self, files: Files, /, *, config: MkDocsConfig) -> Files | None:
        """Import each server anew, describe it, and add the page as a generated file."""
        page = posixpath.normpath(self.config.page)
        if files.get_file_from_path(page) is not None:
            raise PluginError(
                f"idemtools plugin: docs/{page} exists, but the plugin generates that page; "
                "delete the file or set the plugin's 'page' option to another path"
            )
        docs: list[ServerDoc] = []
        fresh: set[str] = set()
        self._watched = []
        for spec in self.config.servers:
            module = parse_spec(spec)[0]
            try:
                server = load_server(spec, fresh=module not in fresh)
                fresh.add(module)
                docs.append(anyio.run(functools.partial(describe, server, source=spec)))
            except DocsError as exc:
                raise PluginError(f"idemtools plugin: {exc}") from None
            path = module_file(spec)
            if path is not None and path not in self._watched:
                self._watched.append(path)
        content = render_page(docs, title=self.config.title)
        files.append(File.generated(config, page, content=content))
        return files

    def on_serve(
        self, server: LiveReloadServer, /, *, config: MkDocsConfig, builder: Any
    ) -> LiveReloadServer | None:
        """Rebuild when a documented server's source changes, not only when docs/ does.

        The Python files beside each server's module are watched, each by its path, never the
        directory: a server run from the project writes its SQLite store, its journal and its
        logs there, and a watched directory would rebuild the site on every one of those
        writes. A file watch still sees an editor that saves by writing a new file and
        renaming it over the old one (watchdog reports the rename onto the watched path).
        """
        for path in watched_sources(self._watched):
            server.watch(path, recursive=False)
        return server


def watched_sources(modules: list[str]) -> list[str]:
    """The `.py` files in the directories of `modules` (the documented servers' files)."""
    found: dict[str, None] = {}
    for module in modules:
        folder = os.path.dirname(module)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            names = []
        for name in names:
            path = os.path.join(folder, name)
            if name.endswith(".py") and os.path.isfile(path):
                found[path] = None
        found.setdefault(module, None)
    return list(found)
