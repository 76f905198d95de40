"""Linear layers over GPTQ weights: torch's own int4 weight-only matmul where the format fits it,
dequantize-then-matmul for the rest. No kernels of our own.

torch's int4 op (the "tinygemm" layout) computes w = (q - 8) * scale + offset per group of input rows
with groups of 32, 64, 128 or 256 consecutive rows. A GPTQ group maps onto that with
offset = (8 - zero) * scale; a GPTQ group size the op does not take (128 over 576 rows, per-channel)
is expressed in smaller groups that repeat its scales; desc_act's scattered groups become consecutive
once the input rows are sorted by group, at the cost of gathering the activations in that order.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from .format import dequantize, unpack_rows, zero_points

INT4_GROUPS = (256, 128, 64, 32)


class DenseLinear:
    """x @ W.T + b with float32 weights (dequantized GPTQ, or unquantized layers)."""

    kind = "dense"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        self.weight = weight.float().contiguous()
        self.bias = bias.float() if bias is not None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * 4


class Int4Linear:
    """torch's int4 weight-only matmul (CPU) over one 4-bit GPTQ layer."""

    kind = "int4"

    def __init__(self, q: torch.Tensor, zeros: torch.Tensor, scales: torch.Tensor, g_idx: torch.Tensor,
                 bias: torch.Tensor | None, group: int) -> None:
        order = torch.argsort(g_idx, stable=True)
        self.order = None if torch.equal(order, torch.arange(len(g_idx))) else order
        g = g_idx.long()[order]  # the group of each input row, rows in sorted order
        rows = q[order]  # [in, out] values 0..15
        self.group = group
        # Each small group lies inside one GPTQ group (group divides the GPTQ group's run of rows).
        first_rows = torch.arange(0, rows.shape[0], group)
        small_scales = scales.float()[g[first_rows]]  # [in / group, out]
        small_zeros = zeros[g[first_rows]].float()
        self.scales_and_zeros = torch.stack([small_scales, (8 - small_zeros) * small_scales], dim=-1).contiguous()
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(rows.T.contiguous().to(torch.int32), 1)
        self.bias = bias.float() if bias is not None else None
        self.out_features = q.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.order is not None:
            x = x[:, self.order]
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x.contiguous(), self.packed, self.group, self.scales_and_zeros)
        return y + self.bias if self.bias is not None else y

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + self.scales_and_zeros.numel() * 4


def int4_group(g_idx: torch.Tensor, in_features: int) -> int | None:
    """The int4 op's group size that fits these GPTQ groups, or None when none does."""
    counts = torch.bincount(g_idx.long())
    # Every GPTQ group, in sorted row order, must be cut evenly into groups the op takes.
    for group in INT4_GROUPS:
        if in_features % group == 0 and bool((counts % group == 0).all()):
            return group
    return None


def gptq_linear(tensors: dict[str, torch.Tensor], bits: int, v1: bool, device: str = "cpu"):
    """The fastest kernel here for one GPTQ layer (qweight, qzeros, scales, g_idx, maybe bias)."""
    q = unpack_rows(tensors["qweight"], bits)
    zeros = zero_points(tensors["qzeros"], bits, v1)
    scales, g_idx, bias = tensors["scales"], tensors["g_idx"], tensors.get("bias")
    if bits == 4 and device == "cpu":
        group = int4_group(g_idx, q.shape[0])
        if group is not None and q.shape[1] % 16 == 0:
            return Int4Linear(q, zeros, scales, g_idx, bias, group)
    return DenseLinear(dequantize(tensors["qweight"], tensors["qzeros"], scales, g_idx, bits, v1), bias)
