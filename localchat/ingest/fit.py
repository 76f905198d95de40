"""How many tokens documents may take: the context less the conversation and the answer's room."""

from __future__ import annotations

ANSWER_RESERVE = 512  # tokens kept free for the answer when documents are fitted into the context
TEMPLATE_SLACK = 32  # the chat template's own tokens around the new turn


def document_budget(n_ctx: int, history_tokens: int, max_tokens: int | None) -> int:
    """Tokens left for the documents and the question in the next user turn."""
    return n_ctx - history_tokens - max(max_tokens or 0, ANSWER_RESERVE) - TEMPLATE_SLACK
