"""A Llama / Qwen2 decoder in plain torch: RMSNorm, rotary positions, grouped-query attention, SwiGLU.

Several sequences go through one forward: every matrix product runs over all their tokens at once,
attention runs per sequence against that sequence's own cache (kv_cache.py). Linear layers are any
callable x -> y (kernels.py), so the same code runs dense, int4-packed and dequantized weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

Linear = Callable[[torch.Tensor], torch.Tensor]

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}


@dataclass(slots=True)
class ModelConfig:
    """The shape of the decoder, from an HF config.json."""

    family: str
    hidden: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    ffn: int
    vocab: int
    eps: float
    rope_theta: float
    n_ctx_train: int
    tie_embeddings: bool
    qkv_bias: bool

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> "ModelConfig":
        family = ARCHITECTURES[config["architectures"][0]]
        n_head = config["num_attention_heads"]
        return cls(
            family=family, hidden=config["hidden_size"], n_layer=config["num_hidden_layers"], n_head=n_head,
            n_head_kv=config.get("num_key_value_heads", n_head),
            head_dim=config.get("head_dim") or config["hidden_size"] // n_head,
            ffn=config["intermediate_size"], vocab=config["vocab_size"], eps=config["rms_norm_eps"],
            rope_theta=config.get("rope_theta", 10000.0),
            n_ctx_train=config.get("max_position_embeddings", 2048),
            tie_embeddings=config.get("tie_word_embeddings", False),
            qkv_bias=family == "qwen2" or config.get("attention_bias", False),
        )


@dataclass(slots=True)
class Layer:
    """One decoder block's weights; the linears are kernels, the norms and biases plain tensors."""

    input_norm: torch.Tensor
    q: Linear
    k: Linear
    v: Linear
    o: Linear
    post_norm: torch.Tensor
    gate: Linear
    up: Linear
    down: Linear


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions in HF's convention: the head's first half pairs with its second half."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


@dataclass(slots=True)
class Row:
    """The tokens of one sequence in a forward: `n` tokens from position `start`, its cache."""

    cache: Any  # kv_cache.SeqCache
    start: int
    n: int


class Decoder:
    """The whole model; forward() takes the rows of one batch and fills their caches."""

    def __init__(self, config: ModelConfig, embed: torch.Tensor, layers: list[Layer], norm: torch.Tensor,
                 lm_head: Linear) -> None:
        self.config = config
        self.embed = embed
        self.layers = layers
        self.norm = norm
        self.lm_head = lm_head
        self.kernel_counts: dict[str, int] = {}  # linears per kernel kind (the loader fills it)
        # The deterministic mode's attention: each row alone over exactly the keys before it (attend_rows).
        self.row_invariant = False
        self.device = embed.device
        dim = config.head_dim
        self.inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

    @torch.inference_mode()
    def perplexity(self, ids: list[int]) -> float:
        """exp of the mean negative log-likelihood of each next token of `ids`, in one forward."""
        from .kv_cache import SeqCache

        c = self.config
        row = Row(SeqCache(c.n_layer, c.n_head_kv, c.head_dim, self.device), 0, len(ids))
        logits = self.forward(torch.tensor(ids, device=self.device), [row], torch.arange(len(ids) - 1, device=self.device))
        return math.exp(F.cross_entropy(logits, torch.tensor(ids[1:], device=self.device)).item())

    def to(self, device: torch.device) -> "Decoder":
        """The model with every tensor on `device` (its linears are dense there: kernels.gptq_linear)."""
        def moved(linear: Linear) -> Linear:
            return linear.to(device)  # type: ignore[attr-defined]

        self.embed, self.norm, self.lm_head = self.embed.to(device), self.norm.to(device), moved(self.lm_head)
        for layer in self.layers:
            layer.input_norm, layer.post_norm = layer.input_norm.to(device), layer.post_norm.to(device)
            for role in ("q", "k", "v", "o", "gate", "up", "down"):
                setattr(layer, role, moved(getattr(layer, role)))
        self.device = torch.device(device)
        return self

    def rope_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)  # float64 on the CPU: not every GPU has it fast
        return (angles.cos().float()[:, None, :].to(self.device), angles.sin().float()[:, None, :].to(self.device))

    def forward(self, tokens: torch.Tensor, rows: list[Row], logits_at: torch.Tensor) -> torch.Tensor:
        """Run `tokens` (the rows' tokens, concatenated); the logits of the token indices `logits_at`."""
        positions = torch.cat([torch.arange(r.start, r.start + r.n) for r in rows])
        cos, sin = self.rope_tables(positions)
        x = self.embed[tokens].float()
        for index in range(len(self.layers)):
            x = self.block(index, x, rows, cos, sin)
        x = rms_norm(x[logits_at], self.norm, self.config.eps)
        return self.lm_head(x)

    def block(self, index: int, x: torch.Tensor, rows: list[Row], cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """One decoder block over the hidden states of the rows' tokens."""
        layer = self.layers[index]
        x = x + self.attention(index, layer, rms_norm(x, layer.input_norm, self.config.eps), rows, cos, sin)
        h = rms_norm(x, layer.post_norm, self.config.eps)
        return x + layer.down(F.silu(layer.gate(h)) * layer.up(h))

    def attention(self, index: int, layer: Layer, h: torch.Tensor, rows: list[Row], cos: torch.Tensor,
                  sin: torch.Tensor) -> torch.Tensor:
        c = self.config
        q = rotate(layer.q(h).view(-1, c.n_head, c.head_dim), cos, sin)
        k = rotate(layer.k(h).view(-1, c.n_head_kv, c.head_dim), cos, sin)
        v = layer.v(h).view(-1, c.n_head_kv, c.head_dim)
        out = []
        first = 0
        for row in rows:
            span = slice(first, first + row.n)
            keys, values = row.cache.write(index, row.start, k[span], v[span])
            how = attend_rows if self.row_invariant else attend
            out.append(how(q[span], keys, values, row.start, c.n_head // c.n_head_kv))
            first += row.n
        return layer.o(torch.cat(out).reshape(-1, c.n_head * c.head_dim))


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, group: int) -> torch.Tensor:
    """Causal attention of queries at positions start.. over keys/values [n_head_kv, length, dim]."""
    n, length = q.shape[0], keys.shape[1]
    if n == 1:  # one new token (decode) sees every key: no mask to build
        mask, causal = None, False
    elif start == 0:  # a whole prompt at once: plain causal
        mask, causal = None, True
    else:  # a chunk after earlier positions
        mask = torch.arange(length, device=q.device)[None, :] <= torch.arange(start, start + n, device=q.device)[:, None]
        causal = False
    # enable_gqa: each key/value head serves `group` query heads without copying it `group` times.
    out = F.scaled_dot_product_attention(q.transpose(0, 1), keys, values, attn_mask=mask, is_causal=causal,
                                         enable_gqa=group > 1)
    return out.transpose(0, 1)


def attend_rows(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, start: int, group: int) -> torch.Tensor:
    """attend() one query row at a time, each over exactly the keys up to its own position: the call a
    decode step makes for that position. torch's CPU attention kernels tile the query rows and the
    keys, so a row read beside others (or in a chunk that starts elsewhere) rounds otherwise than
    the same row alone; which rows share a call follows the step budget, measured in time, and what
    the prefix cache held. Row by row, a token's logits are the same however its prompt was read."""
    return torch.cat([attend(q[i:i + 1], keys[:, : start + i + 1], values[:, : start + i + 1], start + i, group)
                      for i in range(q.shape[0])])
