"""The model a request is answered by: a GPTQ checkpoint folder runs on the torch worker (the optional gptq
extra), a GGUF file on llama.cpp's worker."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ... import gptq
from ...errors import ModelLoadError
from ..gguf_types import pooling_key
from ..worker_types import WorkerConfig
from .worker import Worker


def open_target(model_path: str | Path, config: WorkerConfig,
                on_load_progress: Callable[[float], None] | None = None) -> Worker:
    """The target model's worker, loaded."""
    if not gptq.is_gptq_folder(model_path):
        worker = Worker(model_path, config, on_load_progress)
        if worker.meta(pooling_key(worker.meta("general.architecture") or "")) is not None:
            worker.close()  # llama.cpp loads it and answers every message with nothing
            raise ModelLoadError(f"{Path(model_path).name} is an embedding model: it turns text into vectors (for "
                                 "documents and /v1/embeddings) and writes no text; load a chat model to talk to.")
        return worker
    gptq.require_extra(model_path)
    from .torch_worker import TorchWorker  # here: torch is imported only for a checkpoint

    return TorchWorker(model_path, config)
