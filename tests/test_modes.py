"""The two modes on the real runtime: --deterministic gives the same greedy tokens whatever the
thread count (adaptive threads included) and placement, on a prompt of a few thousand tokens; the
default mode's fast kernels say what they guarantee, and the tests hold them to it."""

from __future__ import annotations

import os
from pathlib import Path

from localchat.models.derive import requantize
from localchat.runtime.backends import kernels
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import BatchRow, Worker, WorkerConfig
from localchat.workloads import document

N_CTX = 4096
QUESTION = "\nWhich dock did record 0-40 leave from, and how many boxes did it carry?"
SHORT = ["Name the capital city of France.", "List three colors.", "Write a haiku about rain.",
         "What is 12 times 12?"]


def long_prompt() -> list[dict[str, str]]:
    return [{"role": "user", "content": document(2600) + QUESTION}]


def answer(model_path: Path, *, threads: int, adapt: bool, pd: bool = False, deterministic: bool = True,
           messages: list | None = None) -> list[int]:
    worker = WorkerConfig(n_ctx=N_CTX, n_batch=512, n_seq_max=4, n_threads=threads, deterministic=deterministic)
    config = EngineConfig(worker=worker, prefill=worker if pd else None, adapt_threads=adapt)
    with Engine.load(model_path, config) as engine:
        result = engine.submit(Request(messages=messages or long_prompt(),
                                       sampling=SamplingParams(temperature=0.0, max_tokens=24))).result()
        assert result.stats.prompt_tokens > 2000
        return result.token_ids


def test_deterministic_tokens_hold_across_thread_counts_and_placements(model_path: Path):
    two = answer(model_path, threads=2, adapt=False)
    assert answer(model_path, threads=2, adapt=True) == two  # the tuner tries 1 thread mid-answer
    assert answer(model_path, threads=1, adapt=False, pd=True) == two  # two workers, one thread each
    assert kernels.active().exact


def chats(engine: Engine, concurrent: bool) -> list[list[int]]:
    def request(q: str) -> Request:
        return Request(messages=[{"role": "user", "content": q}], sampling=SamplingParams(temperature=0.0, max_tokens=32))

    if concurrent:
        streams = [engine.submit(request(q)) for q in SHORT]
        return [s.result().token_ids for s in streams]
    return [engine.submit(request(q)).result().token_ids for q in SHORT]


def test_default_mode_runs_the_fast_kernels_and_agrees_alone_and_concurrent(model_path: Path):
    """What the default mode guarantees: the engine's own bookkeeping is exact; the fast kernels
    round a batch of several rows differently from one, so a near-tie may flip. On these prompts
    the text agrees alone and concurrent on at least 90% of the tokens, and the first tokens agree."""
    config = EngineConfig(worker=WorkerConfig(n_ctx=2048, n_batch=512, n_seq_max=4, n_threads=2))
    # Each run on a fresh cache: what is compared is batching alone, not where earlier requests
    # left holes in the cache (that moves a sequence's cells out of order too; see README).
    with Engine.load(model_path, config) as engine:
        assert not engine.worker.cpu_backend.exact
        assert engine.worker.cpu_backend.variant != "built-in"
        alone = chats(engine, concurrent=False)
    with Engine.load(model_path, config) as engine:
        together = chats(engine, concurrent=True)
    same = sum(a == b for x, y in zip(alone, together) for a, b in zip(x, y))
    total = sum(min(len(x), len(y)) for x, y in zip(alone, together))
    assert same / total >= 0.9, (alone, together)
    assert all(x[:4] == y[:4] for x, y in zip(alone, together))


def test_deterministic_k_quant_rows_round_alike_in_any_batch(model_path: Path):
    """ggml multiplies 8 rows or more by a K-quant matrix in tiles, which round otherwise than one row
    at a time. In --deterministic mode a token's distribution is the same alone as in a verify step of 9
    rows; this file's feed-forward projections are K-quants (Q4_K, Q6_K)."""
    worker = Worker(requantize(model_path, "Q4_K_M"), WorkerConfig(n_ctx=1024, n_threads=2, deterministic=True))
    try:
        tokens = worker.tokenize("The harbour master wrote about the boats and the tides of the lower harbour. " * 5)
        pos = len(tokens) - 9
        worker.decode([BatchRow(0, tokens[:pos], 0, False)])
        alone = []
        for i in range(9):
            worker.decode([BatchRow(0, [tokens[pos + i]], pos + i, True)])
            alone.append(worker.logprob(0, tokens[pos + i + 1] if i < 8 else 0, 8))
        worker.seq_remove(0, pos, -1)
        worker.decode([BatchRow(0, tokens[pos:], pos, True, all_logits=True)])
        together = [worker.logprob(i, tokens[pos + i + 1] if i < 8 else 0, 8) for i in range(9)]
        assert together == alone
        # The switch is this process's own: a child choosing its kernels sees the user's setting.
        assert os.environ[kernels.TILED_SWITCH] == "0"
        assert kernels.child_environ().get(kernels.TILED_SWITCH) == kernels.USER_TILED
    finally:
        worker.close()
