"""What speculation yields at an acceptance rate: the one formula the runtime's draft-length choice
(speculative.py), the planner's draft decision (planning/cost.py) and the wizard's reading of a
measurement (tune/draft.py) share. Pure: planning/ imports it without loading llama.cpp."""

from __future__ import annotations


def expected_tokens(acceptance: float, k: int) -> float:
    """Tokens a step yields with k drafts when each draft is accepted with probability `acceptance`."""
    if acceptance >= 1.0:
        return k + 1.0
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)
