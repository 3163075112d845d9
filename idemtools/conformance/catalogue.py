"""Every check and scenario of the kit, in the order a run takes them.

`checks` puts the SEP's own scenarios (`sep/`) in order, with the table of what each check
tests (`sentences`); `unfixtured` holds the checks that need no fixture tool (a target the
operator did not write); `families` the checks derived rule by rule, one module per family.
Each of those reads the machinery in `scenario` and the sentences in `sentences`; this module
alone puts them together, so that none of them imports another's face.
"""

from __future__ import annotations

from .checks import CHECKS, SCENARIOS, CheckInfo, Scenario
from .families import register
from .unfixtured import FIRST, LAST

__all__ = ["CHECKS", "SCENARIOS", "CheckInfo", "Scenario"]

SCENARIOS[2:2] = [*FIRST]  # after the capability checks (one per era)
SCENARIOS[-1:-1] = [*LAST]  # the base error-code checks stay last
register(CHECKS, SCENARIOS)  # the families' checks, and every scenario's family
