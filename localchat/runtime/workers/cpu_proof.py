"""The child's side of proving a CPU variant (backends/kernels.py): load that variant and the model, run a
prompt batch and single decode steps. A broken kernel kills this process, not the one that asked."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from ...errors import LocalchatError
from ..backends.cpu_variants import is_exact
from ..backends.kernels import MODEL_FAILED, mark_proving
from ..worker_types import BatchRow, WorkerConfig
from .worker import Worker


def prove_in_child(argv: list[str]) -> int:
    """`MODULE MODEL [crash]`: 0 when the variant ran the model, MODEL_FAILED when the model would not load."""
    module, model, crash = Path(argv[0]), argv[1], argv[2:] == ["crash"]
    exact = is_exact(module)
    mark_proving(module, exact=exact)
    if crash:  # the fault a broken kernel causes, for tests of the fallback (no such CPU here)
        os.kill(os.getpid(), signal.SIGILL)
    try:
        worker = Worker(model, WorkerConfig(n_ctx=256, n_batch=64, n_seq_max=1, n_threads=2, deterministic=exact))
    except LocalchatError:
        return MODEL_FAILED
    token = worker.bos_token if worker.bos_token >= 0 else 1
    worker.decode([BatchRow(0, [token] * 64, 0, want_logits=True)])
    for pos in range(64, 67):
        worker.decode([BatchRow(0, [token], pos, want_logits=True)])
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(prove_in_child(sys.argv[1:]))
