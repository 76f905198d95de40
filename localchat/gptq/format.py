"""The GPTQ tensor layout (AutoGPTQ / GPTQModel "gptq" v1 format): int32 packing and dequantization.

qweight [in / (32/bits), out]: `32/bits` values of consecutive input rows per int32, lowest bits first.
qzeros  [groups, out / (32/bits)]: the zero points packed the same way along the output columns, each
        stored minus one (the v1 convention; "gptq_v2" stores them as they are).
scales  [groups, out] (float16), g_idx [in]: the group of every input row (desc_act permutes it).
The weight of input row k, output column n is scales[g, n] * (q[k, n] - zero[g, n]) with g = g_idx[k].
"""

from __future__ import annotations

import torch

SUPPORTED_BITS = (4, 8)
PARTS = ("qweight", "qzeros", "scales", "g_idx")  # the tensors of one quantized linear


def pack_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Integers in [0, 2^bits) of shape [rows, cols] -> int32 [rows / (32/bits), cols]."""
    per = 32 // bits
    rows, cols = values.shape
    assert rows % per == 0, (rows, per)
    grouped = values.to(torch.int64).reshape(rows // per, per, cols)
    shifts = (torch.arange(per, dtype=torch.int64) * bits).view(1, per, 1)
    packed = (grouped << shifts).sum(dim=1)
    return _to_int32(packed)


def unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """The inverse of pack_rows: int32 [rows / (32/bits), cols] -> int32 [rows, cols]."""
    per = 32 // bits
    shifts = (torch.arange(per, dtype=torch.int32) * bits).view(1, per, 1)
    values = (packed.unsqueeze(1) >> shifts) & ((1 << bits) - 1)
    return values.reshape(-1, packed.shape[1])


def pack_cols(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Integers of shape [rows, cols] packed along the columns: int32 [rows, cols / (32/bits)]."""
    return pack_rows(values.T.contiguous(), bits).T.contiguous()


def unpack_cols(packed: torch.Tensor, bits: int) -> torch.Tensor:
    return unpack_rows(packed.T.contiguous(), bits).T.contiguous()


def _to_int32(values: torch.Tensor) -> torch.Tensor:
    # Packed words use all 32 bits: the top one becomes the int32's sign, as in the files.
    return torch.where(values >= 2**31, values - 2**32, values).to(torch.int32)


def zero_points(qzeros: torch.Tensor, bits: int, v1: bool = True) -> torch.Tensor:
    """The real zero point per group and output column."""
    return unpack_cols(qzeros, bits) + (1 if v1 else 0)


def dequantize(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor,
               bits: int, v1: bool = True) -> torch.Tensor:
    """The float32 weight [out, in] (torch's nn.Linear orientation) a GPTQ layer stands for."""
    q = unpack_rows(qweight, bits)
    zeros = zero_points(qzeros, bits, v1)
    g = g_idx.long()
    return ((q - zeros[g]).float() * scales.float()[g]).T.contiguous()
