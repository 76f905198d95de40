"""Log-probabilities of sampled tokens, from the model's own distribution at that position."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .events import TokenLogprob


def token_logprob(logits: np.ndarray, token: int, n_top: int, piece: Callable[[int], bytes]) -> TokenLogprob:
    """`token`'s log-probability and the `n_top` likeliest tokens', by log-softmax over the whole
    vocabulary of the raw logits: the model's distribution before temperature, top-k/p, penalties
    or a grammar shape it (what OpenAI's API reports as logprobs)."""
    values = logits.astype(np.float64)
    peak = values.max()
    log_total = peak + np.log(np.exp(values - peak).sum())
    top: list[tuple[str, bytes, float]] = []
    if n_top:
        best = np.argpartition(-values, n_top - 1)[:n_top]
        for t in best[np.argsort(-values[best], kind="stable")]:
            data = piece(int(t))
            top.append((data.decode("utf-8", errors="replace"), data, float(values[t] - log_total)))
    data = piece(token)
    return TokenLogprob(data.decode("utf-8", errors="replace"), data, float(values[token] - log_total), top)
