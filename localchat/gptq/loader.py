"""Weights of a checked checkpoint into a Decoder, each linear on the fastest kernel that fits it."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file

from ..errors import ModelLoadError
from .checkpoint import Checkpoint, read_checkpoint
from .format import PARTS
from .kernels import ACTIVATIONS, DenseLinear, gptq_linear
from .model import Decoder, Layer, Linear, ModelConfig

log = logging.getLogger(__name__)

ROLES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj",
         "gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}


def build_decoder(config: ModelConfig, tensors: dict[str, torch.Tensor],
                  make_linear: Callable[[str], Linear], head_dtype: torch.dtype = torch.float32) -> Decoder:
    """A Decoder from HF-named tensors; make_linear(prefix) builds the linear stored under prefix,
    the output head computes in head_dtype."""
    layers = []
    for i in range(config.n_layer):
        prefix = f"model.layers.{i}"
        linears = {role: make_linear(f"{prefix}.{name}") for role, name in ROLES.items()}
        layers.append(Layer(input_norm=tensors[f"{prefix}.input_layernorm.weight"].float(),
                            post_norm=tensors[f"{prefix}.post_attention_layernorm.weight"].float(), **linears))
    embed = tensors["model.embed_tokens.weight"]  # its file's dtype: the rows looked up become float32
    head = tensors.get("lm_head.weight")
    if head is None and not config.tie_embeddings:
        raise ModelLoadError("the checkpoint has no lm_head.weight and does not tie it to the embeddings; "
                             "download it again.")
    lm_head = DenseLinear(embed if head is None else head, dtype=head_dtype)
    return Decoder(config, embed, layers, tensors["model.norm.weight"].float(), lm_head)


def dense_linear(tensors: dict[str, torch.Tensor]) -> Callable[[str], Linear]:
    return lambda prefix: DenseLinear(tensors[f"{prefix}.weight"], tensors.get(f"{prefix}.bias"))


def load_decoder(folder: str | Path, need_quantization: bool = True,
                 device: torch.device = torch.device("cpu")) -> tuple[Checkpoint, Decoder]:
    """Read, check and load a checkpoint folder (GPTQ; or unquantized when need_quantization is False) to run
    on `device`: built on the CPU, then moved there whole."""
    checkpoint = read_checkpoint(folder, need_quantization)
    tensors: dict[str, torch.Tensor] = {}
    for path in checkpoint.weight_files:
        try:
            tensors |= load_file(path)
        except Exception as exc:  # safetensors raises its own error type on a damaged file
            raise ModelLoadError(f"{path} does not read as safetensors ({exc}); download it again.") from None
    quant = checkpoint.quant
    kinds: Counter[str] = Counter()

    def make_linear(prefix: str) -> Linear:
        if quant is None:
            return dense_linear(tensors)(prefix)
        parts = {p: tensors.get(f"{prefix}.{p}") for p in PARTS}
        if any(t is None for t in parts.values()):
            missing = [p for p, t in parts.items() if t is None]
            raise ModelLoadError(f"the checkpoint lacks {prefix}.{'/'.join(missing)}; it is incomplete or not "
                                 "GPTQ: download it again.")
        if f"{prefix}.bias" in tensors:
            parts["bias"] = tensors[f"{prefix}.bias"]
        linear = gptq_linear(parts, quant.bits, quant.v1, device.type)
        kinds[linear.kind] += 1
        return linear

    try:
        decoder = build_decoder(checkpoint.model, tensors, make_linear, torch.float32 if quant is None else ACTIVATIONS)
    except KeyError as exc:
        raise ModelLoadError(f"the checkpoint lacks the tensor {exc}; download it again.") from None
    except RuntimeError as exc:  # shapes that do not agree with config.json
        raise ModelLoadError(f"the checkpoint's tensors do not fit its config.json ({exc}).") from None
    if kinds:
        log.info("GPTQ linears: %s", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    decoder.kernel_counts = dict(kinds)
    return checkpoint, decoder.to(device) if device.type != "cpu" else decoder
