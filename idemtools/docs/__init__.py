"""Retention documentation for an idempotent MCP server, generated from what it really runs.

SEP-3182 ("Retention") asks servers to publish their retention window where integrators can
read it. A hand-written page drifts from the code the day someone edits `@idempotent(...)`, so
this package reads the `Installation` that `install()` left on the server (the policies the
engine will apply, the store it writes to, the error codes it sends) and renders that.

It only reads idemtools' own `Installation`, never the mcp SDK, so it works unchanged on every
SDK line `install()` supports.

    server = load_server("myapp.server:server")      # import, find, check idemtools is on it
    doc = anyio.run(describe, server)                 # a ServerDoc: plain, frozen data
    render_markdown(doc)  /  render_json(doc)         # deterministic: same doc, same bytes

One concern per module: `model` (the data and `describe`), `render` (Markdown and JSON),
`examples` (example arguments from a tool's input schema), `store_text` (what the page says
about a store), `loading` (finding a server from `module:attribute`, for the CLI and the mkdocs
plugin), `errors`. Import from here: the module layout is not API.
"""

from __future__ import annotations

from .errors import DocsError, NotInstalledError, ServerImportError, SpecError
from .examples import EXAMPLE_KEY as EXAMPLE_KEY
from .examples import example_arguments
from .loading import load_server, module_file, parse_spec
from .model import ErrorDoc, ServerDoc, StoreDoc, ToolDoc, describe, format_duration
from .render import EXAMPLE_WIDTH as EXAMPLE_WIDTH
from .render import JSON_SCHEMA as JSON_SCHEMA
from .render import render_json, render_markdown, render_page

# The constants above are importable from here too, outside __all__.
__all__ = [
    "DocsError",
    "ErrorDoc",
    "NotInstalledError",
    "ServerDoc",
    "ServerImportError",
    "SpecError",
    "StoreDoc",
    "ToolDoc",
    "describe",
    "example_arguments",
    "format_duration",
    "load_server",
    "module_file",
    "parse_spec",
    "render_json",
    "render_markdown",
    "render_page",
]
