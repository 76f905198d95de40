"""One request's life inside the engine: its tokens, how many are in the KV cache, its timers."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .events import SpecStats, Stats, Stream, TokenLogprob
from .text_output import TextOutput

if TYPE_CHECKING:  # the scheduler stays free of llama_cpp, which sampling imports
    import ctypes

    from .sampling import Sampler


@dataclass(slots=True)
class KVHandover:
    """The KV state of a prompt's first `num_tokens` tokens, exported from the prefill worker (disagg.py)
    or read from disk (kv_disk.py)."""

    fingerprint: str
    num_tokens: int
    data: ctypes.Array  # llama.cpp's serialised state, in host memory
    export_ms: float
    # Tokens the state holds, when more than `num_tokens` (a saved prefix that the prompt shares
    # only in part): the rest is dropped once it is loaded. 0: the same as num_tokens.
    num_state_tokens: int = 0


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
    num_forced: int = 0  # the prompt's last tokens are the answer's forced beginning (Request.forced)
    slot: int | None = None
    admitted_at: int = -1  # admission order, for preempting the youngest first
    prefill_start: int = 0  # tokens already in the KV cache when the sequence was admitted
    ignore_eos: bool = False
    speculate: bool = True
    num_logprobs: int | None = None  # alternatives to report per token; None: no logprobs
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of tokens not yet in a TextDelta
    sampler: Sampler | None = None
    stream: Stream | None = None
    output: TextOutput | None = None
    kv_import: KVHandover | None = None  # a KVHandover whose state becomes this sequence's prompt KV on admission
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

    def stats(self, spec: SpecStats | None = None) -> Stats:
        """The final numbers of this request, from its timers and counters."""
        end = time.perf_counter()
        first = self.t_first_token or end
        n = self.num_generated
        prefill_s = first - self.t_start if self.t_start else 0.0
        return Stats(
            prompt_tokens=self.num_prompt, cached_tokens=self.num_cached, completion_tokens=n,
            ttft_ms=(first - self.t_submit) * 1000 if self.t_first_token else 0.0,
            tokens_per_s=(n - 1) / (end - first) if n > 1 and end > first else 0.0,
            prefill_tokens_per_s=(self.num_prompt - self.num_cached) / prefill_s if prefill_s > 0 else 0.0,
            total_ms=(end - self.t_submit) * 1000,
            kv_transfer_ms=self.transfer_ms, kv_transfer_bytes=self.transfer_bytes, spec=spec,
        )
