"""What speculation yields at an acceptance rate: the one formula the runtime's draft-length choice
(speculative.py), the planner's draft decision (planning/cost.py) and the wizard's reading of a
measurement (tune/draft.py) share; the runtime, which measures each draft position on its own,
uses its general form. Pure: planning/ imports it without loading llama.cpp."""

from __future__ import annotations


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a step yields with k drafts when each draft is accepted with probability `acceptance`."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def expected_tokens_by_position(rates: list[float], k: int) -> float:
    """Tokens a step yields with k drafts when draft i is accepted with probability `rates[i]` once
    every draft before it was (one rate for all gives `expected_tokens`). A copied passage is
    accepted whole or missed at its first token: later positions, once reached, are accepted more
    often than the first, which one rate for all positions underrates."""
    total, reached = 1.0, 1.0
    for rate in rates[:k]:
        reached *= rate
        total += reached
    return total
