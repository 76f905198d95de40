"""The step in progress and what the last steps cost per token: what a model runner's watchdog
(runners/child.py) judges a step by. Per token, so like is judged with like: a step that reads 512
prompt tokens is held to 512 times what a token cost, not to the cost of a one-token decode step."""

from __future__ import annotations

import collections
import statistics
import time
from dataclasses import dataclass

from .scheduler import Step

RECENT_STEPS = 64  # the steps `per_token` is the median of


@dataclass(frozen=True, slots=True)
class Running:
    """One step in progress: when it began (perf_counter) and what it holds (zeros until it is planned)."""

    started: float
    tokens: int = 0  # every token the step decodes: prompt chunks and decoding rows
    prompt_tokens: int = 0  # of those, prompt tokens read
    decode_rows: int = 0  # answers that get their next token
    grammar_rows: int = 0  # rows sampled under a grammar (where llama.cpp can spin for minutes)

    def words(self) -> str:
        """What the step was doing, for the watchdog's message: 'reading 512 prompt tokens beside 1 answer'."""
        parts = []
        if self.prompt_tokens:
            parts.append(f"reading {self.prompt_tokens} prompt token{'s' * (self.prompt_tokens != 1)}")
        if self.decode_rows:
            parts.append(f"writing {self.decode_rows} answer{'s' * (self.decode_rows != 1)}")
        what = " beside ".join(parts) or "preparing its rows"
        if self.grammar_rows:
            what += f", {self.grammar_rows} under a grammar"
        return what


class StepClock:
    """Set by the engine thread (`begin`, `planned`, `end`), read by the watchdog's thread."""

    def __init__(self) -> None:
        self.running: Running | None = None
        self._per_token: collections.deque[float] = collections.deque(maxlen=RECENT_STEPS)

    def begin(self) -> None:
        self.running = Running(time.perf_counter())

    def planned(self, step: Step) -> None:
        """What the step in progress holds, once the scheduler has planned it."""
        assert self.running is not None
        decode_rows = step.num_decode_rows
        grammar = sum(1 for r in step.rows if r.want_logits and getattr(r.seq.sampler, "constrained", False))
        self.running = Running(self.running.started, step.num_tokens, step.num_tokens - decode_rows, decode_rows,
                               grammar)

    def end(self) -> None:
        running, self.running = self.running, None
        # A step under a grammar is what the watchdog suspects: one that slows with every token must not
        # raise the limit it is held to, so only plain steps teach what a token costs.
        if running is not None and running.tokens and not running.grammar_rows:
            self._per_token.append((time.perf_counter() - running.started) / running.tokens)

    @property
    def per_token(self) -> float | None:
        """The median of the last steps' seconds per token (None before the first step): what a token costs here."""
        return statistics.median(self._per_token) if self._per_token else None
