"""Why a server could not be documented: one exception family, one line of message each.

The CLI prints these as `idemtools: error: ...` with exit code 1, the mkdocs plugin raises a
`PluginError`; anything else escaping the generator is a bug in it, not in the server.
"""

from __future__ import annotations

__all__ = ["DocsError", "NotInstalledError", "ServerImportError", "SpecError"]


class DocsError(Exception):
    """The server could not be documented; the message says why, in one line."""


class SpecError(DocsError, ValueError):
    """A server reference is not of the form `module:attribute`."""


class ServerImportError(DocsError):
    """The server's module failed to import, or it has no such attribute."""


class NotInstalledError(DocsError):
    """The object was found, but `idemtools.install()` was never called on it.

    Documenting such a server would publish a retention window it does not honour.
    """


def not_installed(what: str, target: object) -> str:
    """The message of `NotInstalledError`, the same whether `describe` or `load_server` saw it."""
    return (
        f"{what} ({type(target).__name__}) does not have idemtools installed: call "
        "idemtools.install(server) in the module that creates it"
    )
