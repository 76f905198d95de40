"""Checkpoints made here: a GGUF Llama as an HF-layout folder, and that folder GPTQ-quantized.

No GPTQ weights can be fetched on this machine, so the tests and benchmarks make their own from the
embedded SmolLM2 (its F16 file, derived by llama.cpp's quantizer).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from ..errors import ModelLoadError
from .calibrate import SHARED_INPUTS, hessians
from .format import PARTS, dequantize, pack_cols, pack_rows
from .quantize import gptq

GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
CONTROL = 3  # GGUF token type of control tokens


def _fresh(target: Path, source: Path) -> bool:
    done = target / "config.json"
    return done.is_file() and done.stat().st_mtime >= source.stat().st_mtime


def _value(reader: gguf.GGUFReader, key: str):
    field = reader.fields[key]
    if field.types[0] == gguf.GGUFValueType.STRING:
        return field.parts[-1].tobytes().decode("utf-8")
    if field.types[0] == gguf.GGUFValueType.ARRAY:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return [field.parts[i].tobytes().decode("utf-8") for i in field.data]
        return [v for i in field.data for v in field.parts[i].tolist()]
    return field.parts[-1].tolist()[0]


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's reordering of Q and K rows (interleaved rotary pairs -> HF's two halves)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_from_gguf(source: Path, target: Path) -> Path:
    """An F16 (or F32) llama GGUF as an HF folder: config.json, model.safetensors, tokenizer files."""
    if _fresh(target, source):
        return target
    reader = gguf.GGUFReader(source)
    arch = _value(reader, "general.architecture")
    if arch != "llama" or _value(reader, "tokenizer.ggml.model") != "gpt2":
        raise ModelLoadError(f"{source} is a {arch} GGUF; only llama files with a byte-level BPE vocabulary convert.")
    n_head, n_head_kv = _value(reader, "llama.attention.head_count"), _value(reader, "llama.attention.head_count_kv")
    tensors: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        if t.tensor_type not in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32):
            raise ModelLoadError(f"{source} holds {t.tensor_type.name} tensors; convert an F16 file.")
        data = np.asarray(t.data).reshape(list(reversed(t.shape.tolist())))
        parts = t.name.split(".")
        if parts[0] == "blk":
            role = GGUF_NAMES[parts[2]]
            if parts[2] in ("attn_q", "attn_k"):
                data = _unpermute(data, n_head if parts[2] == "attn_q" else n_head_kv)
            name = f"model.layers.{parts[1]}.{role}.weight"
        else:
            name = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                    "output.weight": "lm_head.weight"}[t.name]
        tensors[name] = torch.from_numpy(data.astype(np.float16))
    tokens = _value(reader, "tokenizer.ggml.tokens")
    bos, eos = _value(reader, "tokenizer.ggml.bos_token_id"), _value(reader, "tokenizer.ggml.eos_token_id")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": _value(reader, "llama.embedding_length"),
        "intermediate_size": _value(reader, "llama.feed_forward_length"),
        "num_hidden_layers": _value(reader, "llama.block_count"),
        "num_attention_heads": n_head, "num_key_value_heads": n_head_kv,
        "rms_norm_eps": _value(reader, "llama.attention.layer_norm_rms_epsilon"),
        "rope_theta": _value(reader, "llama.rope.freq_base"),
        "max_position_embeddings": _value(reader, "llama.context_length"),
        "vocab_size": len(tokens), "tie_word_embeddings": "lm_head.weight" not in tensors,
        "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "float16",
    }
    target.mkdir(parents=True, exist_ok=True)
    save_file(tensors, target / "model.safetensors")
    _tokenizer(reader, tokens).save(str(target / "tokenizer.json"))
    settings = {"bos_token": tokens[bos], "eos_token": tokens[eos], "add_bos_token": False,
                "chat_template": _value(reader, "tokenizer.chat_template")}
    (target / "tokenizer_config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
    (target / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")  # last: marks it done
    return target


def _tokenizer(reader: gguf.GGUFReader, tokens: list[str]) -> Tokenizer:
    """The GGUF's byte-level BPE as a tokenizers Tokenizer (SmolLM's digit-by-digit pre-split)."""
    if _value(reader, "tokenizer.ggml.pre") not in ("smollm",):
        raise ModelLoadError("only the smollm pre-tokenizer converts; use the GGUF file itself.")
    merges = [tuple(m.split(" ", 1)) for m in _value(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    types = _value(reader, "tokenizer.ggml.token_type")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == CONTROL])
    return tok


def calibration_chunks(folder: Path, text: str, size: int = 512) -> list[list[int]]:
    """`text` in the folder's tokens, cut into sequences of `size` tokens (each starts a new context)."""
    from .tokenizer import CheckpointTokenizer

    tok = CheckpointTokenizer(folder, json.loads((folder / "config.json").read_text(encoding="utf-8")))
    ids = tok.encode(text, False, False)
    return [ids[i:i + size] for i in range(0, len(ids), size)]


def quantize_folder(source: Path, target: Path, calibration: list[list[int]], *, bits: int = 4, group: int = 128,
                    sym: bool = False, desc_act: bool = True, rtn: bool = False, damp: float = 0.1) -> Path:
    """`source` (an unquantized HF folder) quantized with GPTQ, or round-to-nearest when `rtn`.

    The defaults are what measured best on SmolLM2-135M (docs/benchmarks.md, GPTQ): with GPTQ's usual
    1% dampening the error compensation fits the calibration text's activations so closely that the
    model gets worse than plain rounding on other text; 10% keeps it general. desc_act (the columns
    with the largest inputs first) and asymmetric groups (a zero point per group) help a little more."""
    # The recipe goes into the file, so a cached folder made from other text or settings is made again.
    recipe = {"quantizer": "localchat", "method": "rtn" if rtn else "gptq",
              "calibration_sha256": hashlib.sha256(json.dumps(calibration).encode()).hexdigest()[:16],
              "calibration_tokens": sum(map(len, calibration))}
    quant = {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": desc_act, "sym": sym,
             "checkpoint_format": "gptq", "pack_dtype": "int32", "damp_percent": damp,
             "true_sequential": False, "meta": recipe}
    if _fresh(target, source / "config.json") and _quant_of(target) == quant:
        return target
    config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    dense = load_file(source / "model.safetensors")
    out: dict[str, torch.Tensor] = {k: v for k, v in dense.items() if not k.endswith("proj.weight")}

    def quantize_layer(index: int, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        new = {}
        for names in SHARED_INPUTS:
            keys = [f"model.layers.{index}.{name}" for name in names]
            weights = [dense[f"{key}.weight"] for key in keys]
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # the column loop is thousands of small products: threads only add waiting
            try:
                result = gptq(torch.cat(weights), None if rtn else inputs[names[0]], bits, group, sym, desc_act, damp)
            finally:
                torch.set_num_threads(threads)
            first = 0
            for name, key, weight in zip(names, keys, weights):
                cols = slice(first, first + weight.shape[0])
                first += weight.shape[0]
                out[f"{key}.qweight"] = pack_rows(result.q[:, cols], bits)
                out[f"{key}.qzeros"] = pack_cols(result.zeros[:, cols] - 1, bits)  # v1: stored minus one
                out[f"{key}.scales"] = result.scales[:, cols].half()
                out[f"{key}.g_idx"] = result.g_idx.clone()  # one tensor per linear in the file
                new[name] = dequantize(*(out[f"{key}.{part}"] for part in PARTS), bits)  # what a loader reads
        return new

    if rtn:  # rounding needs no activations: skip the calibration forward
        for index in range(config["num_hidden_layers"]):
            quantize_layer(index, {})
    else:
        hessians(config, dense, calibration, quantize_layer)
    target.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, target / "model.safetensors")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (target / name).write_bytes((source / name).read_bytes())
    (target / "quantize_config.json").write_text(json.dumps(quant, indent=1), encoding="utf-8")
    config = {**config, "quantization_config": quant, "torch_dtype": "float16"}
    (target / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return target


def _quant_of(folder: Path) -> dict | None:
    return json.loads((folder / "config.json").read_text(encoding="utf-8")).get("quantization_config")
