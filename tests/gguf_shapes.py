"""GGUF files of today's model shapes, written with the gguf package: tiny dimensions, llama.cpp's real tensor
names and types, random weights (headers for the fit and cost model), and a real model split into parts as
llama.cpp's gguf-split writes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

VOCAB, EMBD, FF, LAYERS = 256, 64, 64, 2
EXPERTS, USED = 8, 2          # a gpt-oss-shaped mixture: 8 experts per layer, 2 per token
PER_LAYER = 32                # a Gemma 3n-shaped per-layer embedding width


def _tensor(writer, name: str, shape: tuple[int, ...], kind: str, rng: np.random.Generator) -> None:
    """A tensor of ggml shape `shape` (innermost first) at `kind`: F32, F16, Q8_0 or MXFP4 (raw random blocks)."""
    import gguf

    if kind in ("F32", "F16"):
        writer.add_tensor(name, rng.standard_normal(shape[::-1]).astype(np.float32 if kind == "F32" else np.float16))
        return
    qtype = gguf.GGMLQuantizationType[kind]
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows = shape[1:][::-1]
    raw = rng.integers(0, 255, size=(*rows, shape[0] // block * size), dtype=np.uint8)
    if kind == "Q8_0":  # each block starts with an f16 scale: keep it finite
        raw.reshape(-1, size)[:, :2] = np.frombuffer(np.float16(0.01).tobytes(), dtype=np.uint8)
    writer.add_tensor(name, raw, raw_dtype=qtype)  # a byte shape: the writer derives the element shape


def _header(writer, layers: int = LAYERS) -> None:
    writer.add_block_count(layers)
    writer.add_embedding_length(EMBD)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_context_length(4096)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])


def _write(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _attention(writer, i: int, rng: np.random.Generator) -> None:
    for part, rows in (("q", EMBD), ("k", EMBD // 2), ("v", EMBD // 2), ("output", EMBD)):
        _tensor(writer, f"blk.{i}.attn_{part}.weight", (EMBD, rows), "F16", rng)
    _tensor(writer, f"blk.{i}.attn_norm.weight", (EMBD,), "F32", rng)


def gpt_oss_gguf(path: Path) -> Path:
    """gpt-oss's layout: F16 attention and a router per layer, experts stacked in MXFP4 (ffn_*_exps) with
    F32 biases, an untied output head; the header says expert_count and expert_used_count."""
    import gguf

    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(path, arch="gpt-oss")
    _header(writer)
    writer.add_expert_count(EXPERTS)
    writer.add_expert_used_count(USED)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    _tensor(writer, "token_embd.weight", (EMBD, VOCAB), "Q8_0", rng)
    _tensor(writer, "output.weight", (EMBD, VOCAB), "Q8_0", rng)
    for i in range(LAYERS):
        _attention(writer, i, rng)
        _tensor(writer, f"blk.{i}.ffn_gate_inp.weight", (EMBD, EXPERTS), "F32", rng)
        for part in ("gate", "up"):
            _tensor(writer, f"blk.{i}.ffn_{part}_exps.weight", (EMBD, FF, EXPERTS), "MXFP4", rng)
            _tensor(writer, f"blk.{i}.ffn_{part}_exps.bias", (FF, EXPERTS), "F32", rng)
        _tensor(writer, f"blk.{i}.ffn_down_exps.weight", (FF, EMBD, EXPERTS), "MXFP4", rng)
    _write(writer)
    return path


def gemma3n_gguf(path: Path, layers: int = LAYERS) -> Path:
    """Gemma 3n's layout: a tied token embedding and the per-layer token embedding (per_layer_token_embd,
    PER_LAYER columns for each layer), both Q8_0, beside dense layers; the header says the per-layer width."""
    import gguf

    rng = np.random.default_rng(1)
    writer = gguf.GGUFWriter(path, arch="gemma3n")
    _header(writer, layers)
    writer.add_uint32("gemma3n.embedding_length_per_layer_input", PER_LAYER)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    _tensor(writer, "token_embd.weight", (EMBD, VOCAB), "Q8_0", rng)
    _tensor(writer, "per_layer_token_embd.weight", (PER_LAYER * layers, VOCAB), "Q8_0", rng)
    for i in range(layers):
        _attention(writer, i, rng)
        for part in ("gate", "up"):
            _tensor(writer, f"blk.{i}.ffn_{part}.weight", (EMBD, FF), "Q8_0", rng)
        _tensor(writer, f"blk.{i}.ffn_down.weight", (FF, EMBD), "Q8_0", rng)
    _write(writer)
    return path


def split_gguf(source: Path, first: Path, parts: int) -> list[Path]:
    """`source` rewritten as `parts` files named as gguf-split names them (`first` is the stem's path: the
    parts are STEM-00001-of-0000N.gguf beside it): the metadata in the first, the tensors spread over all,
    each part saying split.no, split.count and split.tensors.count."""
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(first, arch=arch, split_max_tensors=-(-len(reader.tensors) // parts))
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # the writer writes these itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    _write(writer)
    names = sorted(first.parent.glob(f"{first.stem}-*-of-*.gguf"))
    assert len(names) == parts, names
    return names
