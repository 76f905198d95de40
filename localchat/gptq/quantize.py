"""GPTQ (Frantar et al., 2022): quantize a weight matrix column by column, spreading each column's
rounding error over the columns not yet quantized, weighted by the inverse Hessian of the layer's
inputs (H = X^T X over calibration activations). Plain round-to-nearest is the same loop without
the error update, kept for comparison."""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 128  # columns per lazy batch: updates inside a block go column by column, past it at once


@dataclass(slots=True)
class Quantized:
    """One layer's integers and their group parameters, in GPTQ's orientation."""

    q: torch.Tensor  # [in, out] integers in [0, 2^bits)
    zeros: torch.Tensor  # [groups, out] integer zero points
    scales: torch.Tensor  # [groups, out]
    g_idx: torch.Tensor  # [in] group of each input row


def group_params(w: torch.Tensor, bits: int, sym: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero point per output row for the columns `w` [out, cols] of one group."""
    maxq = 2**bits - 1
    low = w.min(dim=1).values.clamp(max=0)
    high = w.max(dim=1).values.clamp(min=0)
    if sym:
        high = torch.maximum(low.abs(), high)
        scale = 2 * high / maxq
        zero = torch.full_like(scale, (maxq + 1) // 2)
    else:
        scale = (high - low) / maxq
        # GPTQ's v1 files store zero - 1, so a zero point of 0 cannot be written: keep it >= 1.
        zero = torch.round(-low / torch.where(scale > 0, scale, 1)).clamp(1, maxq)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return scale, zero


def quantize_column(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, maxq: int) -> torch.Tensor:
    return torch.clamp(torch.round(w / scale) + zero, 0, maxq)


def gptq(weight: torch.Tensor, hessian: torch.Tensor | None, bits: int, group: int, sym: bool,
         act_order: bool, damp: float = 0.01) -> Quantized:
    """Quantize weight [out, in]; hessian None is round-to-nearest (no error compensation)."""
    w = weight.float().clone()
    out_features, columns = w.shape
    group = group if group > 0 else columns
    maxq = 2**bits - 1
    perm = torch.arange(columns)
    hinv = None
    if hessian is not None:
        h = hessian.double().clone()
        dead = torch.diag(h) == 0  # inputs that never fired: their weights cannot matter
        h[dead, dead] = 1
        w[:, dead] = 0
        if act_order:  # the columns with the largest inputs first, while the most columns can absorb error
            perm = torch.argsort(torch.diag(h), descending=True)
            w, h = w[:, perm], h[perm][:, perm]
        h += damp * torch.diag(h).mean() * torch.eye(columns, dtype=h.dtype)
        # The upper Cholesky factor of H^-1: row i holds how column i's error moves the later columns.
        hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True).float()
    q = torch.zeros_like(w)
    n_groups = (columns + group - 1) // group
    scales = torch.zeros(n_groups, out_features)
    zeros = torch.zeros(n_groups, out_features)
    for i1 in range(0, columns, BLOCK):
        i2 = min(i1 + BLOCK, columns)
        errors = torch.zeros(out_features, i2 - i1)
        for i in range(i1, i2):
            if i % group == 0:
                scales[i // group], zeros[i // group] = group_params(w[:, i:i + group], bits, sym)
            scale, zero = scales[i // group], zeros[i // group]
            column = w[:, i]
            q[:, i] = quantize_column(column, scale, zero, maxq)
            if hinv is not None:
                error = errors[:, i - i1]
                torch.div(column - (q[:, i] - zero) * scale, hinv[i, i], out=error)
                w[:, i + 1:i2].addr_(error, hinv[i, i + 1:i2], alpha=-1)
        if hinv is not None:
            w[:, i2:].addmm_(errors, hinv[i1:i2, i2:], alpha=-1)
    g_idx = torch.empty(columns, dtype=torch.int32)
    g_idx[perm] = (torch.arange(columns) // group).to(torch.int32)
    inverse = torch.argsort(perm)  # back to the file's row order
    return Quantized(q[:, inverse].T.to(torch.int32).contiguous(), zeros.to(torch.int32), scales, g_idx)
