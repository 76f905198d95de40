"""How many tokens documents may take: the context less the conversation and the answer's room."""

from __future__ import annotations

ANSWER_RESERVE = 512  # tokens kept free for the answer when documents are fitted into the context
TEMPLATE_SLACK = 32  # the chat template's own tokens around the new turn
# Passages chosen for one question take at most this share of the context: each follow-up in a chat
# retrieves its own, and only the newest question carries them (ui/chat/pinned.py: read_as).
PASSAGE_SHARE = 0.3


def document_budget(n_ctx: int, history_tokens: int, max_tokens: int | None) -> int:
    """Tokens left for the documents and the question in the next user turn."""
    return n_ctx - history_tokens - max(max_tokens or 0, ANSWER_RESERVE) - TEMPLATE_SLACK


def passage_budget(n_ctx: int) -> int:
    """Tokens one question's retrieved passages may take, so that later questions find room too."""
    return int(n_ctx * PASSAGE_SHARE)
