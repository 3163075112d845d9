"""The `idemtools` command: `idemtools docs module:attribute [-o FILE] [--format markdown|json]`,
`idemtools conformance TARGET` (the black-box SEP-3182 kit, `idemtools.conformance.cli`,
which has its own exit codes: 0 conformant, 1 a MUST check failed, 2 target unreachable), and
`idemtools keys show|release STORE_URL --key K --scope S` (one record, for operators; see
`idemtools.cli.keys`).

Exit codes follow shell habit: 0 done, 2 usage errors (argparse's own code, also for a
reference that is not `module:attribute`), 1 when the server cannot be loaded or documented,
with one line on stderr saying why, never a traceback: it is meant for CI and Makefiles.
"""

from __future__ import annotations

from .main import (
    main,
)

__all__ = [
    "main",
]
