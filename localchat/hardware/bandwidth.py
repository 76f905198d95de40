"""Measured memory bandwidth: host RAM with numpy, each CUDA GPU with torch. Short, best-of timings."""

from __future__ import annotations

import os
import threading
import time

# Copy bandwidth counts bytes read plus bytes written, as STREAM's copy does; decode reads weights
# once per token, so this is the number the roofline divides by.
_HOST_BYTES = 128 << 20   # well beyond any CPU cache, so the copy measures DRAM
_GPU_BYTES = 1 << 30      # beyond the L2 of any current GPU


def measure_host_bandwidth(seconds: float = 0.3, n_bytes: int = _HOST_BYTES, threads: int | None = None) -> float | None:
    """Host RAM copy bandwidth in bytes/s (best of repeated copies), or None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    # llama.cpp reads weights from all cores at once, and one core rarely saturates DRAM: copy
    # slices in parallel threads (numpy releases the GIL while it copies).
    threads = max(1, min(threads or os.cpu_count() or 1, 16))
    src = np.ones(n_bytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch: page faults are not bandwidth
    bounds = [(len(src) * i // threads, len(src) * (i + 1) // threads) for i in range(threads)]

    def copy_all() -> None:
        workers = [threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b])) for a, b in bounds]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    best, deadline = 0.0, time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        copy_all()
        best = max(best, 2 * src.nbytes / (time.perf_counter() - start))
        if time.perf_counter() > deadline:
            return best


def measure_gpu_bandwidth(index: int, seconds: float = 0.3, n_bytes: int = _GPU_BYTES) -> float | None:
    """Device-to-device copy bandwidth of CUDA GPU `index` in bytes/s, or None without torch+CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    device = torch.device("cuda", index)
    free, _ = torch.cuda.mem_get_info(device)
    n_bytes = min(n_bytes, free // 4)  # two buffers, leaving room for whoever else uses the GPU
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        begin.record()
        for _ in range(5):
            dst.copy_(src)
        end.record()
        end.synchronize()
        elapsed = begin.elapsed_time(end) / 1000 / 5
        best = max(best, 2 * src.numel() * 4 / elapsed)
    del src, dst
    torch.cuda.empty_cache()
    return best or None
