"""Draft acceptance on the real runtime: the same greedy chats plain, with the draft as launches run it,
and with a fixed draft length (for the acceptance the planner's model needs)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

from ..runtime.speculation.acceptance import expected_tokens

PROMPTS = ("Write a short story about a lighthouse keeper.", "Explain how rain forms, step by step.")
# Drafting a fixed length every step gives every drafted position a fair trial; the adaptive
# controller drafts little where drafts do not pay, which would leave acceptance barely sampled.
FORCED_K = 4


@dataclass(slots=True)
class DraftMeasurement:
    """What a draft model does for one target on this machine."""

    draft_path: str
    acceptance: float          # per drafted token, under the planner's model (see acceptance_from)
    drafted_acceptance: float  # accepted / drafted, as the runtime counts it
    tokens_per_pass: float     # tokens per target pass at k = FORCED_K
    k: float                   # mean drafted tokens per pass in that run
    plain_tps: float
    draft_tps: float           # adaptive speculation, as a launch runs it
    identical: bool            # greedy output the same in all three runs (it must be)

    @property
    def speedup(self) -> float:
        """Decode speed with the draft over plain decoding."""
        return self.draft_tps / self.plain_tps if self.plain_tps > 0 else 0.0

    def to_dict(self) -> dict:
        """Plain data for JSON."""
        return {**asdict(self), "speedup": round(self.speedup, 3)}


Speculation = tuple[str, DraftMeasurement, float]  # (draft key, what was measured, predicted speedup)


def acceptance_from(tokens_per_pass: float, k: float) -> float:
    """The per-token acceptance a for which k drafts yield `tokens_per_pass` tokens per target pass
    (the runtime's `expected_tokens`, the model the planner's draft decision uses)."""
    if k <= 0 or tokens_per_pass <= 1.0:
        return 0.0
    if tokens_per_pass >= k + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):  # the expected count grows with a: bisect
        mid = (low + high) / 2
        if expected_tokens(mid, k) < tokens_per_pass:
            low = mid
        else:
            high = mid
    return round((low + high) / 2, 4)


def _chats(path: Path, config, n_tokens: int) -> tuple[list, list[list[int]]]:
    from ..runtime.engine import Engine, Request
    from ..workloads import greedy

    stats, tokens = [], []
    with Engine.load(path, config) as engine:
        for prompt in PROMPTS:
            result = engine.submit(Request(messages=[{"role": "user", "content": prompt}],
                                           sampling=greedy(n_tokens))).result()
            stats.append(result.stats)
            tokens.append(result.token_ids)
    return stats, tokens


def measure_draft(path: str | Path, draft_path: str | Path, n_ctx: int = 4096, n_threads: int = 0,
                  n_gpu_layers: int = 0, n_tokens: int = 64) -> DraftMeasurement:
    """Greedy chats on `path` plain, with the draft (adaptive) and with the draft at k = FORCED_K."""
    from ..runtime.engine import EngineConfig
    from ..runtime.speculation.speculative import SpecConfig
    from ..runtime.workers.worker import WorkerConfig

    worker = WorkerConfig(n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers)
    draft = Path(draft_path)
    plain, plain_tokens = _chats(Path(path), EngineConfig(worker=worker), n_tokens)
    adaptive, adaptive_tokens = _chats(Path(path), EngineConfig(worker=worker, draft_path=draft), n_tokens)
    forced, forced_tokens = _chats(Path(path), EngineConfig(worker=worker, draft_path=draft,
                                                            spec=SpecConfig(fixed_k=FORCED_K)), n_tokens)
    specs = [s.spec for s in forced if s.spec is not None]
    drafted, accepted = sum(s.drafted for s in specs), sum(s.accepted for s in specs)
    passes = sum(s.target_passes for s in specs)
    per_pass = (accepted + passes) / passes if passes else 1.0
    k = drafted / passes if passes else 0.0
    return DraftMeasurement(
        draft_path=str(draft_path), acceptance=acceptance_from(per_pass, k),
        drafted_acceptance=round(accepted / drafted, 4) if drafted else 0.0, tokens_per_pass=round(per_pass, 3),
        k=round(k, 2), plain_tps=round(statistics.median(s.tokens_per_s for s in plain), 1),
        draft_tps=round(statistics.median(s.tokens_per_s for s in adaptive), 1),
        identical=plain_tokens == adaptive_tokens == forced_tokens)
