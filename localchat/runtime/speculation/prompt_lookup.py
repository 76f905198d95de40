"""Prompt lookup: drafts are the tokens that followed the sequence's last n-gram earlier on."""

from __future__ import annotations

from ..sequence import Sequence


class NgramIndex:
    """Where each recent n-gram of a sequence last occurred, kept up to date as tokens arrive."""

    def __init__(self, max_n: int = 4) -> None:
        self.max_n = max_n
        self._last: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # n-grams ending before this position are indexed

    def _catch_up(self, tokens: list[int]) -> None:
        # Index n-grams that end strictly before the last token, so a match always has a successor.
        for end in range(self._indexed, len(tokens) - 1):
            for n in range(1, self.max_n + 1):
                if end - n + 1 >= 0:
                    self._last[tuple(tokens[end - n + 1:end + 1])] = end + 1
        self._indexed = max(self._indexed, len(tokens) - 1)

    def propose(self, tokens: list[int], k: int, min_n: int = 2) -> list[int]:
        """Tokens that followed the longest earlier occurrence of the sequence's last n-gram."""
        self._catch_up(tokens)
        for n in range(min(self.max_n, len(tokens)), min_n - 1, -1):
            follow = self._last.get(tuple(tokens[-n:]))
            if follow is not None:
                return tokens[follow:follow + k]
        return []


class PromptLookup:
    """Drafts by n-gram lookup over the prompt and the text so far: free, strong when answers quote."""

    name = "prompt-lookup"
    catch_up_seconds = 0.0  # indexing new tokens is part of its (free) drafting

    def __init__(self, max_n: int = 4, min_n: int = 2) -> None:
        self.max_n = max_n
        self.min_n = min_n
        self._index: dict[str, NgramIndex] = {}

    def seconds_per_token(self) -> float:
        return 0.0

    def calibrate(self) -> None:
        """Nothing to measure: a lookup costs nothing next to a model step."""

    def propose(self, wanted: list[tuple[Sequence, int]]) -> dict[str, list[int]]:
        drafts = {}
        for seq, k in wanted:
            index = self._index.setdefault(seq.id, NgramIndex(self.max_n))
            drafts[seq.id] = index.propose(seq.tokens, k, self.min_n)
        return drafts

    def forget(self, seq: Sequence) -> None:
        self._index.pop(seq.id, None)

    def close(self) -> None:
        self._index.clear()
