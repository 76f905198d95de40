"""What a saved sequence state may claim before llama.cpp reads it: its size, bounded by what the
context can hold, and its cells' positions, checked against the prompt the state says it holds.

A state read back from disk is untrusted input: its digests sit in the same file, so they prove it
whole, not honest. A claimed size is checked before any buffer is allocated (a header that says
100 GB must not kill the reader thread, nor one under the RAM allocate gigabytes), and positions
that are not the prompt's own 0..n-1 (all zeros, say) would make `llama_decode` fail for every
request in the batch, each time that prompt came.

llama.cpp's layout of one sequence's state: u32 0xaf143cd8 and i32 seq_id (`state_seq_get_data`;
older versions wrote neither), then the cache's own (`llama_kv_cache::state_write`, the same for the
first cache of an interleaved-SWA model): u32 n_stream; per stream u32 cell_count, then per cell i32
pos, u32 n_seq_id (1 for one sequence), [a 12-byte extension for M-RoPE and PLE models], i32 seq_id;
then the layers' rows.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

_U32 = struct.Struct("<I")
IO_MAGIC = 0xAF143CD8  # llama-context.cpp's io_magic, before the sequence id
_CELL = 12  # pos, n_seq_id, seq_id
_CELL_EXT = 24  # pos, n_seq_id, the 12-byte extension, seq_id


@dataclass(frozen=True, slots=True)
class StateLimits:
    """The bounds a context puts on a state it could have saved."""

    n_ctx: int  # cells the context holds: no prefix is longer
    bytes_per_cell: int  # an upper bound on one cell's bytes, every layer's K and V rows and its metadata
    fixed_bytes: int = 1 << 20  # headers, and a recurrent model's per-sequence state
    plain_kv: bool = True  # an attention KV cache whose cell positions can be checked (not recurrent)

    def max_bytes(self, num_tokens: int) -> int:
        """The most bytes a state of `num_tokens` cells can take in this context."""
        return self.fixed_bytes + min(num_tokens, self.n_ctx) * self.bytes_per_cell

    def check(self, data: memoryview | bytes, num_tokens: int) -> None:
        """Raise ValueError unless `data` holds exactly the cells 0..num_tokens-1 of one sequence."""
        if not 0 < num_tokens <= self.n_ctx:
            raise ValueError(f"it claims {num_tokens} tokens; this context holds {self.n_ctx}")
        if not self.plain_kv:
            return  # a recurrent state keeps one cell per sequence: its layout is not read here
        view = memoryview(data).cast("B")
        start = 8 if len(view) >= 4 and _U32.unpack_from(view, 0)[0] == IO_MAGIC else 0
        if len(view) < start + 8:
            raise ValueError("its state is too short to hold any cell")
        (n_stream,) = _U32.unpack_from(view, start)
        (cell_count,) = _U32.unpack_from(view, start + 4)
        if n_stream != 1:
            raise ValueError(f"its state has {n_stream} streams; a unified cache has 1")
        if cell_count != num_tokens:
            raise ValueError(f"its state holds {cell_count} cells for {num_tokens} tokens")
        for stride in (_CELL, _CELL_EXT):
            if _positions_hold(view, start + 8, cell_count, stride):
                return
        raise ValueError("its cells' positions are not the prompt's 0.."
                         f"{num_tokens - 1} of one sequence")


def _positions_hold(view: memoryview, offset: int, count: int, stride: int) -> bool:
    """Whether `count` cells of `stride` bytes at `offset` are each one sequence's and their positions
    are 0..count-1, in any order (a prefix shared between slots may sit in cells out of order)."""
    end = offset + count * stride
    if end > len(view):
        return False
    cells = array("i")
    cells.frombytes(view[offset:end].tobytes())
    if array("i", [1]).tobytes() != struct.pack("<i", 1):  # big-endian host: the state is little-endian
        cells.byteswap()
    words = stride // 4
    if any(n != 1 for n in cells[1::words]) or any(s < 0 for s in cells[words - 1::words]):
        return False
    positions = cells[0::words]
    return sorted(positions) == list(range(count))


def limits_of(worker) -> StateLimits:
    """A llama.cpp worker's bounds: each cell at most every head's K and V rows in float32 (the
    widest type a cache holds), in every layer, plus its metadata."""
    import llama_cpp

    model = worker.model
    n_layer = llama_cpp.llama_model_n_layer(model)
    n_embd = llama_cpp.llama_model_n_embd(model)
    n_head = max(1, llama_cpp.llama_model_n_head(model), llama_cpp.llama_model_n_head_kv(model))
    arch = worker.meta("general.architecture") or ""
    head_k = _int(worker.meta(f"{arch}.attention.key_length")) or n_embd // n_head
    head_v = _int(worker.meta(f"{arch}.attention.value_length")) or n_embd // n_head
    width = n_head * (max(head_k, 1) + max(head_v, 1))
    recurrent = bool(llama_cpp.llama_model_is_recurrent(model)) or bool(llama_cpp.llama_model_is_hybrid(model))
    per_cell = n_layer * max(width, 2 * n_embd) * 4 + _CELL_EXT
    # A recurrent model's state is per sequence, not per cell: a few of its widest rows per layer.
    fixed = (1 << 20) + (n_layer * n_embd * 4 * 64 if recurrent else 0)
    return StateLimits(worker.n_ctx, per_cell, fixed, plain_kv=not recurrent)


def _int(value: str | None) -> int:
    try:
        return max(0, int(value)) if value is not None else 0
    except ValueError:
        return 0
