"""Derived model files: other quant levels of a local GGUF, and tiny random-weight models with its vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import llama_cpp
import numpy as np

from ..errors import ModelLoadError
from ..paths import models_dir
from ..runtime.gguf_types import FILE_TYPE_ID

# The quant levels derived files come in, with their llama_ftype ids.
FTYPES = {quant: FILE_TYPE_ID[quant] for quant in ("Q4_0", "Q4_1", "Q8_0", "F16", "F32", "Q5_0", "Q5_1", "Q4_K_M", "Q5_K_M",
                                                      "Q6_K")}


def requantize(source: Path, quant: str, target: Path | None = None) -> Path:
    """`source` re-quantized to `quant` (cached next to the downloaded models)."""
    if quant not in FTYPES:
        raise ModelLoadError(f"unknown quant '{quant}'; choose one of {', '.join(FTYPES)}.")
    target = target or models_dir() / f"{source.stem.rsplit('.', 1)[0]}.{quant}.gguf"
    if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[quant]
    params.allow_requantize = True
    partial = target.with_name(target.name + ".partial")
    if llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(), params) != 0:
        partial.unlink(missing_ok=True)
        raise ModelLoadError(f"llama.cpp could not quantize {source} to {quant}.")
    partial.replace(target)
    return target


VOCAB_CHANGES = ("rename", "shrink")
RENAMED_IDS = (1000, 2000, 3000)
SHRINK_BY = 500


def random_weights_like(
    source: Path,
    target: Path | None = None,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    seed: int = 0,
    vocab_change: str | None = None,
) -> Path:
    """A tiny random-weight llama GGUF with `source`'s tokenizer (or a deliberately incompatible copy)."""
    if vocab_change not in (None, *VOCAB_CHANGES):
        raise ValueError(f"vocab_change must be None or one of {VOCAB_CHANGES}, not {vocab_change!r}.")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must be a multiple of n_head, and n_head a multiple of n_head_kv.")
    if target is None:
        # Every shape parameter is in the name, so differently shaped files never shadow each other.
        change = f"-{vocab_change}" if vocab_change else ""
        target = models_dir() / f"random-{n_layer}x{n_embd}-{n_head}h{n_head_kv}kv{n_ff}ff-{seed}{change}.gguf"
    if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
        return target

    reader = gguf.GGUFReader(source)
    fields = reader.fields
    tokenizer = {key: _field_value(field) for key, field in fields.items() if key.startswith("tokenizer.")}
    tokens = tokenizer["tokenizer.ggml.tokens"]
    if vocab_change == "rename":
        # Same count, different text: only a per-token comparison can tell the vocabularies apart.
        for i in RENAMED_IDS:
            tokens[i] = f"renamed-token-{i}".encode()
    elif vocab_change == "shrink":
        # Fewer tokens than llama.cpp's 128-token slack for draft/target vocabularies allows.
        for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            if key in tokenizer:
                tokenizer[key] = tokenizer[key][:-SHRINK_BY]
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"])
    context_key = f"{_field_value(fields['general.architecture']).decode()}.context_length"
    n_ctx = _field_value(fields[context_key]) if context_key in fields else 2048

    partial = target.with_name(target.name + ".partial")
    writer = gguf.GGUFWriter(partial, arch="llama")
    writer.add_name(target.stem)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, value in tokenizer.items():
        # The source's own value types: the writer would guess INT32 for every int (ids are UINT32).
        kinds = fields[key].types
        writer.add_key_value(key, value, kinds[0], sub_type=kinds[-1] if len(kinds) > 1 else None)

    rng = np.random.default_rng(seed)
    n_embd_kv = n_head_kv * (n_embd // n_head)

    big = 1 << 24  # past this many weights a matrix repeats one random block: billions of fresh
    block: list[np.ndarray] = []  # normals take minutes to draw, and speed does not depend on them

    def matrix(rows: int, cols: int) -> np.ndarray:
        # numpy shape is (out, in), ggml's ne reversed; small values keep activations finite.
        if rows * cols <= big:
            return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)
        if not block:
            block.append((np.random.default_rng(seed + 1).standard_normal(big, dtype=np.float32) * 0.02)
                         .astype(np.float16))
        return np.resize(block[0], (rows, cols))

    ones = np.ones(n_embd, dtype=np.float32)  # norms stay F32, as llama.cpp's own converter writes them
    # No output.weight: llama.cpp then reuses token_embd, which is most of the file's bytes.
    tensors = {"token_embd.weight": matrix(n_vocab, n_embd), "output_norm.weight": ones}
    for i in range(n_layer):
        tensors |= {
            f"blk.{i}.attn_norm.weight": ones,
            f"blk.{i}.attn_q.weight": matrix(n_embd, n_embd),
            f"blk.{i}.attn_k.weight": matrix(n_embd_kv, n_embd),
            f"blk.{i}.attn_v.weight": matrix(n_embd_kv, n_embd),
            f"blk.{i}.attn_output.weight": matrix(n_embd, n_embd),
            f"blk.{i}.ffn_norm.weight": ones,
            f"blk.{i}.ffn_gate.weight": matrix(n_ff, n_embd),
            f"blk.{i}.ffn_up.weight": matrix(n_ff, n_embd),
            f"blk.{i}.ffn_down.weight": matrix(n_embd, n_ff),
        }
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    writer.close()
    partial.replace(target)
    return target


def _field_value(field: gguf.ReaderField) -> Any:
    """A GGUFReader field as a GGUFWriter value: bytes for strings, Python lists and scalars otherwise."""
    # Strings stay bytes (the writer takes them as-is): decoding would fail on any token that is not UTF-8.
    parts = field.parts
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [parts[i].tobytes() for i in field.data]
        return [value for i in field.data for value in parts[i].tolist()]
    if field.types[0] == gguf.GGUFValueType.STRING:
        return parts[-1].tobytes()
    return parts[-1].tolist()[0]
