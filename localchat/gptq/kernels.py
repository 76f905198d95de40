"""Linear layers over GPTQ weights: torch's own int4 weight-only matmul where the format fits it,
dequantize-then-matmul for the rest. No kernels of our own.

torch's int4 op (the "tinygemm" layout) computes w = (q - 8) * scale + offset per group of input rows
with groups of 32, 64, 128 or 256 consecutive rows. A GPTQ group maps onto that with
offset = (8 - zero) * scale; a GPTQ group size the op does not take (128 over 576 rows, per-channel)
is expressed in smaller groups that repeat its scales; desc_act's scattered groups become consecutive
once the input rows are sorted by group, at the cost of gathering the activations in that order.

Precision: torch's CPU int4 op is fast only with bfloat16 activations (one 1536x576 layer, one token:
~0.1 ms against ~11 ms with float32, docs/benchmarks.md), so every linear of a quantized checkpoint
takes its input rounded to bfloat16 and bfloat16 weights (the int4 op's scales and offsets, the
dequantized layers, the output head), accumulates in float32 and rounds its output to bfloat16;
norms, rotary positions, attention and the residual stream stay float32. Unquantized checkpoints
(the calibration, the perplexity baseline) run float32 throughout.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from .format import dequantize, unpack_rows, zero_points

INT4_GROUPS = (256, 128, 64, 32)
# torch 2.13's CPU int4 op slows down ~5x per row past about 24 rows in one call (1536x576, bfloat16:
# 16 rows ~0.5 ms, 32 rows ~4-8 ms), so a prompt goes through it 16 rows at a time.
INT4_ROWS_PER_CALL = 16


ACTIVATIONS = torch.bfloat16  # what the linears of a quantized checkpoint compute in (see above)


class DenseLinear:
    """x @ W.T + b with the weights in `dtype` (dequantized GPTQ, unquantized layers, the output head);
    float32 in and out."""

    kind = "dense"

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 dtype: torch.dtype = torch.float32) -> None:
        self.dtype = dtype
        self.weight = weight.to(dtype).contiguous()
        self.bias = bias.float() if bias is not None else None  # added in float32, as Int4Linear does

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x.to(self.dtype), self.weight).float()
        return y + self.bias if self.bias is not None else y

    def to(self, device: torch.device) -> "DenseLinear":
        """The same layer with its weights on `device` (built on the CPU, run on a GPU)."""
        self.weight = self.weight.to(device)
        self.bias = self.bias.to(device) if self.bias is not None else None
        return self

    @property
    def nbytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


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
        self.scales_and_zeros = torch.stack([small_scales, (8 - small_zeros) * small_scales], dim=-1).to(ACTIVATIONS)
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(rows.T.contiguous().to(torch.int32), 1)
        self.bias = bias.float() if bias is not None else None
        self.out_features = q.shape[1]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.order is not None:
            x = x[:, self.order]
        x = x.to(ACTIVATIONS)
        parts = [torch.ops.aten._weight_int4pack_mm_for_cpu(x[i:i + INT4_ROWS_PER_CALL].contiguous(), self.packed,
                                                            self.group, self.scales_and_zeros)
                 for i in range(0, x.shape[0], INT4_ROWS_PER_CALL)]
        y = (parts[0] if len(parts) == 1 else torch.cat(parts)).float()
        return y + self.bias if self.bias is not None else y

    @property
    def nbytes(self) -> int:
        return self.packed.numel() + self.scales_and_zeros.numel() * 2


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
    return DenseLinear(dequantize(tensors["qweight"], tensors["qzeros"], scales, g_idx, bits, v1), bias, ACTIVATIONS)
