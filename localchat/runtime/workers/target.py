"""The model a request is answered by: a GPTQ checkpoint folder runs on the torch worker (the optional gptq
extra), a GGUF file on llama.cpp's worker."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ... import gptq
from ..worker_types import WorkerConfig
from .worker import Worker


def open_target(model_path: str | Path, config: WorkerConfig,
                on_load_progress: Callable[[float], None] | None = None) -> Worker:
    """The target model's worker, loaded."""
    if not gptq.is_gptq_folder(model_path):
        return Worker(model_path, config, on_load_progress)
    gptq.require_extra(model_path)
    from .torch_worker import TorchWorker  # here: torch is imported only for a checkpoint

    return TorchWorker(model_path, config)
