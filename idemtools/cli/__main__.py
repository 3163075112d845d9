"""`python -m idemtools.cli`: the `idemtools` command."""

import sys

from .main import main

sys.exit(main())
