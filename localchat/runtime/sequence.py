"""One request's life inside the engine: its tokens, how many are in the KV cache, its timers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, eq=False)
class Sequence:
    """`tokens` is the prompt plus every generated token; the first `num_computed` are in the KV cache.

    The scheduler reads only the token counters; `sampler`, `stream` and `output` belong to the engine.
    """

    id: str
    tokens: list[int]
    max_tokens: int
    num_prompt: int = 0
    num_computed: int = 0
    num_cached: int = 0  # prompt tokens that were already resident when the sequence started
    slot: int | None = None
    admitted_at: int = -1  # admission order, for preempting the youngest first
    ignore_eos: bool = False
    speculate: bool = True
    sampler: Any = None
    stream: Any = None
    output: Any = None
    kv_import: Any = None  # a KVHandover whose state becomes this sequence's prompt KV on admission
    transfer_ms: float = 0.0  # time spent moving KV state between workers (PD split)
    transfer_bytes: int = 0
    t_submit: float = field(default_factory=time.perf_counter)
    t_start: float = 0.0
    t_first_token: float = 0.0

    def __post_init__(self) -> None:
        if not self.num_prompt:
            self.num_prompt = len(self.tokens)

    @property
    def num_generated(self) -> int:
        return len(self.tokens) - self.num_prompt

    @property
    def num_pending(self) -> int:
        """Tokens not yet in the KV cache (a decoding sequence has exactly its last sample)."""
        return len(self.tokens) - self.num_computed

    @property
    def is_decoding(self) -> bool:
        return self.num_generated > 0 and self.num_pending == 1

    @property
    def generated(self) -> list[int]:
        return self.tokens[self.num_prompt:]
