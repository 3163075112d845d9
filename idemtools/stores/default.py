"""The store a server gets when it names none: chosen from the transport it serves.

Why not always `MemoryStore`: on stdio a host may start a fresh server process per tool call
(langchain-mcp-adapters opens a session per call) or restart the server between a call and its
retry. Records that die with the process protect nothing there: the retry runs the tool again.
So on stdio the default keeps its records in one SQLite file per server in the user's state
directory (`platformdirs.user_state_dir("idemtools")`, e.g. `~/.local/state/idemtools` on Linux;
`XDG_STATE_HOME` moves it), across the processes of that server. The boundary is the OS user:
the directory is 0700 and the file 0600.

Everywhere else (HTTP, SSE, the in-memory transport of tests) the process lives as long as its
records must, and `MemoryStore` stays the default. `IDEMTOOLS_STORE` (a store URL, e.g.
`memory://`) or an explicit `store=` opts out.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from .base import Store
from .memory import MemoryStore
from .sqlite import SQLiteStore
from .urls import from_url

__all__ = [
    "ENV",
    "default_store_path",
    "entry_point",
    "from_env",
    "proxy_default_store",
    "proxy_entry_point",
    "stdio_default_store",
]

ENV = "IDEMTOOLS_STORE"
"""The environment variable naming a server's store as a URL (`from_url`)."""

log = logging.getLogger("idemtools")


def from_env() -> Store | None:
    """The store `IDEMTOOLS_STORE` names, or None when it is unset or empty."""
    url = os.environ.get(ENV, "").strip()
    if not url:
        return None
    return from_url(url)


def entry_point() -> str:
    """The resolved path of the running program: `__main__.__file__`, else `sys.argv[0]`.

    Part of the default store's file name, so two servers that share a name (two checkouts of
    one project) never share records.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or (sys.argv[0] if sys.argv else "")
    if not path or path in ("-c", "-m", "-"):
        return ""
    try:
        return str(Path(path).resolve())
    except OSError:
        return str(path)


def default_store_path(server_name: str, entry: str | None = None) -> Path:
    """Where the stdio default keeps the records of `server_name` run from `entry`."""
    from platformdirs import user_state_dir

    entry = entry_point() if entry is None else entry
    digest = hashlib.sha256(f"{server_name}\0{entry}".encode("utf-8", "surrogatepass")).hexdigest()
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", server_name).strip("-.")[:40] or "server"
    return Path(user_state_dir("idemtools")) / f"{readable}-{digest[:16]}.db"


def stdio_default_store(server_name: str, entry: str | None = None) -> Store:
    """A `SQLiteStore` at `default_store_path`, its directory 0700 and its file 0600.

    A directory that cannot be written (a read-only home, a container) gives a `MemoryStore`
    and one WARNING naming the path and the cause: the server still starts.
    """
    path = default_store_path(server_name, entry)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)  # mkdir's mode is masked by the umask, and exist_ok skips it
        # Created 0600 before SQLite opens it: its -wal and -shm files take the same mode.
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.close(fd)
        os.chmod(path, 0o600)
    except OSError as exc:
        log.warning(
            "idemtools cannot keep records at %s (%s: %s): this stdio server runs on the "
            "in-memory store, so a retry sent to a new server process runs the tool again. "
            "Set IDEMTOOLS_STORE (e.g. sqlite:///a/writable/path.db) or XDG_STATE_HOME",
            path,
            type(exc).__name__,
            exc.strerror or exc,
        )
        return MemoryStore()
    return SQLiteStore(str(path))


def proxy_entry_point(command: Sequence[str]) -> str:
    """What names an upstream's default store file: its command, with every path made absolute.

    The program is looked up on PATH and made absolute; every argument that names an existing
    file or directory (alone, or as the value of `--option=value`) is made absolute against the
    working directory the upstream inherits (the proxy's own). So `node dist/index.js` in two
    projects is two servers, and so is `.venv/bin/python -m server` in two environments;
    the same command in the same place is one server, whichever process runs it. Symbolic
    links are kept, not followed: a virtual environment's `bin/python` links to the one
    interpreter every environment shares. Other arguments are kept as they are (`--port 1`
    and `--port 2` are two servers); a command that names no file (`npx -y @org/server`) is
    one server wherever it runs.
    """
    argv = list(command)
    if not argv:
        return ""
    found = shutil.which(argv[0])
    entry = [os.path.abspath(found) if found else argv[0]]
    for argument in argv[1:]:
        option, equals, value = argument.partition("=")
        if equals and option.startswith("-") and _names_a_path(value):
            entry.append(f"{option}={os.path.abspath(value)}")
        elif _names_a_path(argument):
            entry.append(os.path.abspath(argument))
        else:
            entry.append(argument)
    return shlex.join(entry)


def _names_a_path(argument: str) -> bool:
    return bool(argument) and os.path.exists(argument)  # False for a name the OS refuses


def proxy_default_store(command: Sequence[str]) -> Store:
    """`idemtools proxy` on stdio without `--store`: a file per upstream entry point
    (`proxy_entry_point`), so two upstreams never share records."""
    return stdio_default_store("idemtools-proxy", proxy_entry_point(command))
