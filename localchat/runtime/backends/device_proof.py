"""A GPU device proven by computing on it: a small matrix product and a sum run through ggml's backend
API on the device, read back and checked against the same arithmetic done here.

Listing a device proves only that its driver answered; a driver that crashes, hangs or computes wrong
numbers in its kernels (a broken install, a GPU the build has no kernels for) would otherwise first
show itself in the middle of a model's load or as a garbled answer. This runs in the child process
that proves a module (devices.py), so a crash or a hang costs that child; the parent refuses the
module with the reason. The inputs are multiples of 1/16 below 1: exact in half precision too, so a
device that computes in f16 gets the same sums, and any difference beyond rounding is a wrong kernel.
"""

from __future__ import annotations

import ctypes

from .cpu_variants import ggml_library

K, M, N = 64, 32, 8  # a (M x K) matrix times (N x K) rows: big enough for a real matmul kernel, tiny to run
TOLERANCE = 1e-3  # relative to the largest sum: rounding of f32 accumulation, never a wrong kernel
GGML_TYPE_F32 = 0


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


def _lib() -> ctypes.CDLL:
    lib = ggml_library()  # ggml-base's symbols are reached through libggml, so it is the same ggml
    if not getattr(lib, "_localchat_compute", False):
        p, size = ctypes.c_void_p, ctypes.c_size_t
        signatures = {
            "ggml_init": ([_InitParams], p), "ggml_free": ([p], None),
            "ggml_new_tensor_2d": ([p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64], p),
            "ggml_mul_mat": ([p, p, p], p), "ggml_add": ([p, p, p], p),
            "ggml_new_graph": ([p], p), "ggml_build_forward_expand": ([p, p], None),
            "ggml_backend_dev_init": ([p, ctypes.c_char_p], p), "ggml_backend_free": ([p], None),
            "ggml_backend_alloc_ctx_tensors": ([p, p], p), "ggml_backend_buffer_free": ([p], None),
            "ggml_backend_tensor_set": ([p, p, size, size], None), "ggml_backend_tensor_get": ([p, p, size, size], None),
            "ggml_backend_graph_compute": ([p, p], ctypes.c_int),
        }
        for name, (args, result) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, result
        lib._localchat_compute = True
    return lib


def inputs() -> tuple[list[float], list[float], list[float]]:
    """The matrix a (M rows of K), the rows b (N rows of K) and the addend c (N rows of M), row-major."""
    def values(count: int, seed: int) -> list[float]:
        return [((i * 7 + seed * 13) % 31 - 15) / 16 for i in range(count)]

    return values(M * K, 1), values(N * K, 2), values(N * M, 3)


def expected(a: list[float], b: list[float], c: list[float]) -> list[float]:
    """b @ a.T + c, ggml's mul_mat then add, row-major (N rows of M)."""
    return [sum(a[m * K + k] * b[n * K + k] for k in range(K)) + c[n * M + m] for n in range(N) for m in range(M)]


def compute(device: int, wrong: bool = False) -> str:
    """Run the check on a ggml device (its handle): "" when its numbers agree, else what went wrong.
    `wrong`: the read-back is spoiled as a broken kernel would (tests; no such GPU here)."""
    lib = _lib()
    backend = lib.ggml_backend_dev_init(device, None)
    if not backend:
        return "it could not start a computation on the device"
    ctx = lib.ggml_init(_InitParams(1 << 20, None, True))  # tensors' metadata only: the data is on the device
    buffer = None
    try:
        a, b, c = (lib.ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, rows) for cols, rows in ((K, M), (K, N), (M, N)))
        out = lib.ggml_add(ctx, lib.ggml_mul_mat(ctx, a, b), c)
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, out)
        buffer = lib.ggml_backend_alloc_ctx_tensors(ctx, backend)
        if not buffer:
            return "it could not allocate 20 KB on the device"
        given = inputs()
        for tensor, values in zip((a, b, c), given):
            data = (ctypes.c_float * len(values))(*values)
            lib.ggml_backend_tensor_set(tensor, data, 0, ctypes.sizeof(data))
        status = lib.ggml_backend_graph_compute(backend, graph)
        if status != 0:
            return f"its test computation failed (ggml status {status})"
        got = (ctypes.c_float * (N * M))()
        lib.ggml_backend_tensor_get(out, got, 0, ctypes.sizeof(got))
        if wrong:
            got[N * M // 2] += 1.0
        want = expected(*given)
        scale = max(abs(x) for x in want)
        error = max(abs(g - w) for g, w in zip(got, want))
        if not error <= TOLERANCE * scale:  # a NaN fails too
            return f"its test computation gave wrong numbers (off by {error:.3g} in sums up to {scale:.3g})"
        return ""
    finally:
        if buffer:
            lib.ggml_backend_buffer_free(buffer)
        lib.ggml_free(ctx)
        lib.ggml_backend_free(backend)
