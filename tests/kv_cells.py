"""What a llama.cpp worker's KV cache holds, read from llama.cpp itself: the tests check that freed
sequences really left the cache, which the engine never needs to ask."""

from __future__ import annotations

import llama_cpp

from localchat.runtime.workers.worker import Worker


def seq_pos_max(worker: Worker, seq_id: int) -> int:
    """The highest position sequence `seq_id` holds in the worker's KV cache; -1 when it holds none."""
    return llama_cpp.llama_memory_seq_pos_max(worker.memory, seq_id)
