"""What a worker is given: its configuration and the rows of a batch, without llama.cpp.

Both workers (worker.py on llama.cpp, torch_worker.py on torch) take these, and planning/ and the
launch name them without loading llama.cpp.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(slots=True)
class WorkerConfig:
    """How a worker loads its model: llama.cpp's names for llama.cpp's knobs."""

    n_ctx: int = 8192
    n_batch: int = 512
    n_seq_max: int = 8
    n_threads: int = 0
    n_gpu_layers: int = 0
    main_gpu: int = 0
    split_mode: str = "none"  # none: all offloaded layers on main_gpu | layer: spread by tensor_split
    tensor_split: tuple[float, ...] = ()  # share of the layers per GPU of `gpus`, for split_mode "layer"
    gpus: tuple[int, ...] = ()  # the GPUs (usable-device indices) a layer split spreads over; () all of them
    flash_attn: bool = True
    # The same greedy tokens however a prompt is batched, chunked, reused or threaded. The default
    # mode takes the fastest kernels, whose rounding depends on the batch: llamafile's sgemm and
    # repacked weights serve several rows with other kernels than one, and ggml's CPU flash
    # attention on an F16 cache tiles ubatches of 64+ tokens and splits a lone token's attention
    # over the threads. Deterministic runs the CPU kernels built without llamafile, plain weights
    # and a Q8_0 (else BF16) KV cache, for which flash attention has one per-row kernel whatever
    # the batch and the thread count. The torch worker's attention reads each row alone then
    # (gptq/model.py: attend_rows); its linears give a row the same result in any batch already.
    deterministic: bool = False
    # Where the torch worker runs a GPTQ checkpoint: auto takes CUDA where torch sees a GPU (llama.cpp's
    # workers ignore it; their GPUs are n_gpu_layers' and main_gpu's).
    torch_device: str = "auto"


TORCH_DEVICES = ("auto", "cpu", "cuda")


@dataclass(slots=True)
class BatchRow:
    """Tokens of one sequence that go into one llama_decode, starting at position `pos`."""

    seq_id: int
    tokens: list[int]
    pos: int
    want_logits: bool  # logits for the last token of the row
    all_logits: bool = False  # logits for every token of the row (verifying drafts)


def default_threads() -> int:
    """The physical cores (psutil), else the logical ones: llama.cpp's threads wait on each other on a shared core."""
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:
        return os.cpu_count() or 1
