"""The SEP's own scenarios, one module per concern; `checks` puts them in the order a run takes.

Each scenario makes a few `tools/call`s against the fixture tools and decides the checks whose
sentences `sentences.CHECKS` holds. The checks derived later, rule by rule, from the ways an
implementation gets a rule wrong are in `families/`.
"""
