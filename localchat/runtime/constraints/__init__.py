"""Constrained decoding: GBNF grammars, JSON schemas turned into them, and the checks (and resampling) for what a grammar cannot express."""
