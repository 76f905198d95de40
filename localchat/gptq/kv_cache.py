"""Per-sequence KV caches in torch tensors, with the sequence operations the engine's slot table runs."""

from __future__ import annotations

import torch

GROW_BY = 256  # cells added at a time: a cache grows with its sequence, not to n_ctx up front


class SeqCache:
    """Keys and values of one sequence slot: [layer, k|v, kv head, position, dim], positions 0..length."""

    def __init__(self, n_layer: int, n_head_kv: int, head_dim: int, device: torch.device | str = "cpu") -> None:
        self.data = torch.empty(n_layer, 2, n_head_kv, 0, head_dim, device=device)
        self.length = 0

    def _reserve(self, cells: int) -> None:
        if cells > self.data.shape[3]:
            grown = torch.empty(*self.data.shape[:3], max(cells, self.data.shape[3]) + GROW_BY, self.data.shape[4],
                                device=self.data.device)
            grown[:, :, :, : self.length] = self.data[:, :, :, : self.length]
            self.data = grown

    def write(self, layer: int, start: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [n, kv head, dim] keys/values at positions start..; all keys and values up to them."""
        assert start <= self.length, (start, self.length)  # positions run without gaps
        end = start + k.shape[0]
        self._reserve(end)
        self.data[layer, 0, :, start:end] = k.transpose(0, 1)
        self.data[layer, 1, :, start:end] = v.transpose(0, 1)
        self.length = end  # every layer writes the same span; a later position is stale after it
        return self.data[layer, 0, :, :end], self.data[layer, 1, :, :end]

    def remove(self, start: int, end: int) -> None:
        """Drop positions [start, end) (end -1: to the end); only a tail can go, as positions stay dense."""
        end = self.length if end < 0 else min(end, self.length)
        if start >= end:
            return
        assert end == self.length, "only a sequence's tail can be removed from a torch cache"
        self.length = start

    def copy_from(self, other: "SeqCache", start: int, end: int) -> None:
        """Take `other`'s positions [start, end) (end -1: all it has)."""
        end = other.length if end < 0 else min(end, other.length)
        if start >= end:
            return
        assert start <= self.length, (start, self.length)
        self._reserve(end)
        self.data[:, :, :, start:end] = other.data[:, :, :, start:end]
        self.length = end

    def export(self) -> torch.Tensor:
        return self.data[:, :, :, : self.length].clone()

    def load(self, state: torch.Tensor) -> None:
        self.data = state.clone()
        self.length = state.shape[3]

    @property
    def nbytes(self) -> int:
        return self.data.element_size() * self.data.numel()
