"""GGUF headers (v2/v3), read from a local file (a bounded, growing prefix: gguf_bytes.py), for exact model facts."""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import LocalchatError
from ..runtime.gguf_types import (FILE_TYPES, GGML_TYPES, GGUF_ARRAY, GGUF_INT32, GGUF_MAGIC, GGUF_SCALARS, GGUF_STRING,
                                  pooling_key)
from .gguf_bytes import GGUFError, HeaderReader, file_reader
from .split_files import part_paths

_MAX_KEY = 1 << 16          # no real key is longer; a larger length means a corrupt file
_MAX_DIMS = 4               # GGML_MAX_DIMS
DEFAULT_HEADER_LIMIT = 64 << 20  # real headers are a few MB (vocab arrays); more means corruption
_MAX_VOCAB = 1 << 22        # token arrays beyond this are corruption, and would cost GBs as Python objects


@dataclass(slots=True)
class TensorInfo:
    """One tensor's entry in the header: name, shape, ggml type, offset in the data section, bytes."""

    name: str
    shape: list[int]
    ggml_type: int
    offset: int
    n_bytes: int


@dataclass(slots=True)
class ArraySummary:
    """A long metadata array kept as its element type and length only (merges, scores)."""

    value_type: int
    count: int


@dataclass(slots=True)
class GGUFInfo:
    """What a GGUF header says: metadata, tensors, and the architecture facts derived from them."""

    source: str
    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int | None
    arch: str = "unknown"
    n_layer: int = 0
    n_embd: int = 0
    n_head: int = 0
    n_head_kv: int = 0
    head_dim: int = 0
    context_length: int = 0
    sliding_window: int | None = None
    vocab_size: int = 0
    quant: str | None = None
    tokenizer_model: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    tokenizer_fingerprint: str | None = None
    n_expert: int = 0                # a mixture of experts: experts per layer, and how many a token uses
    n_expert_used: int = 0
    per_layer_embd: int = 0          # Gemma 3n: each layer's own token embedding width
    kv_layers: int | None = None     # layers with a KV cache of their own, where later ones share it

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def layer_bytes(self, experts_only: bool = False) -> list[int]:
        """Weight bytes of each repeating block (blk.N.*), index N; `experts_only`: of its experts' tensors."""
        sizes = [0] * self.n_layer
        for tensor in self.tensors:
            index = _block_index(tensor.name)
            if index is not None and index < len(sizes) and (not experts_only or is_expert_tensor(tensor.name)):
                sizes[index] += tensor.n_bytes
        return sizes

    def host_bytes(self) -> int:
        """The token embeddings llama.cpp keeps in host memory wherever the layers run: token_embd, and
        Gemma 3n's per-layer table (n_vocab rows of per_layer_embd for every layer)."""
        return sum(t.n_bytes for t in self.tensors if t.name in HOST_TENSORS)


GEMMA3N_KV_LAYERS = 20  # llama-model.cpp: hparams.n_layer_kv_from_start for LLM_ARCH_GEMMA3N
# llama.cpp creates these in its input buffer, on the CPU, whatever is offloaded (llama-model.cpp).
HOST_TENSORS = ("token_embd.weight", "per_layer_token_embd.weight")


def is_expert_tensor(name: str) -> bool:
    """A mixture-of-experts layer's stacked expert weights (ffn_gate_exps, ffn_up_exps, ffn_down_exps, their
    biases): a token reads only its chosen experts' slices of them."""
    return "_exps." in name


def _int(metadata: dict[str, Any], key: str, default: int | None = 0) -> int | None:
    """An integer metadata value; a per-layer list gives its maximum (it bounds memory)."""
    value = metadata.get(key, default)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return max(value)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise GGUFError(f"'{key}' is {value!r}, not an integer; the header is corrupt.")


def _derive(info: GGUFInfo) -> None:
    meta = info.metadata
    arch = meta.get("general.architecture", "unknown")
    info.arch = arch if isinstance(arch, str) else "unknown"
    prefix = info.arch + "."
    info.n_layer = _int(meta, prefix + "block_count") or 0
    info.n_embd = _int(meta, prefix + "embedding_length") or 0
    info.n_head = _int(meta, prefix + "attention.head_count") or 0
    info.n_head_kv = _int(meta, prefix + "attention.head_count_kv", info.n_head) or 0
    key_length = _int(meta, prefix + "attention.key_length", None)
    info.head_dim = key_length or (info.n_embd // info.n_head if info.n_head else 0)
    info.context_length = _int(meta, prefix + "context_length") or 0
    info.sliding_window = _int(meta, prefix + "attention.sliding_window", None) or None
    tokens = meta.get("tokenizer.ggml.tokens")
    n_tokens = tokens.count if isinstance(tokens, ArraySummary) else len(tokens) if isinstance(tokens, list) else 0
    info.vocab_size = _int(meta, prefix + "vocab_size", n_tokens) or 0
    file_type = _int(meta, "general.file_type", None)
    info.quant = None if file_type is None else FILE_TYPES.get(file_type, f"ftype {file_type}")
    model = meta.get("tokenizer.ggml.model")
    info.tokenizer_model = model if isinstance(model, str) else None
    info.bos_token_id = _int(meta, "tokenizer.ggml.bos_token_id", None)
    info.eos_token_id = _int(meta, "tokenizer.ggml.eos_token_id", None)
    info.n_expert = _int(meta, prefix + "expert_count") or 0
    info.n_expert_used = _int(meta, prefix + "expert_used_count") or 0
    info.per_layer_embd = _int(meta, prefix + "embedding_length_per_layer_input") or 0
    # llama.cpp's gemma3n loader keeps a cache for the first 20 layers whatever the header says (its
    # attention.shared_kv_layers is written as a float, and not read); the later layers reuse those.
    info.kv_layers = min(GEMMA3N_KV_LAYERS, info.n_layer) if info.arch == "gemma3n" else None


def _block_index(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    number = name[4:].split(".", 1)[0]
    return int(number) if number.isdigit() else None


def _read_value(reader: HeaderReader, value_type: int, key: str, keep_array: bool, depth: int = 0) -> Any:
    if value_type in GGUF_SCALARS:
        return reader.unpack(GGUF_SCALARS[value_type], key)
    if value_type == GGUF_STRING:
        return reader.string(key)
    if value_type != GGUF_ARRAY or depth > 1:
        raise GGUFError(f"{reader.what}: unknown value type {value_type} for '{key}'; the header is corrupt.")
    elem_type, count = reader.unpack("<I", key), reader.unpack("<Q", key)
    elem_size = struct.calcsize(GGUF_SCALARS[elem_type]) if elem_type in GGUF_SCALARS else 8
    if count * elem_size > reader.remaining():
        raise GGUFError(f"{reader.what}: the array '{key}' claims {count} elements, more than the file holds; "
                        "the header is corrupt.")
    if keep_array and count > _MAX_VOCAB:
        raise GGUFError(f"{reader.what}: the array '{key}' claims {count} elements; the header is corrupt.")
    if elem_type in GGUF_SCALARS:
        raw = reader.take(count * elem_size, key)
        if not keep_array or count > 64 and key not in _KEPT_TOKENIZER_ARRAYS:
            return ArraySummary(elem_type, count)
        return list(struct.unpack(f"<{count}{GGUF_SCALARS[elem_type][1]}", raw))
    if elem_type == GGUF_STRING and not keep_array:  # merges: walk the lengths, skip the text
        for _ in range(count):
            reader.string(key, decode=False)
        return ArraySummary(elem_type, count)
    values = [_read_value(reader, elem_type, key, keep_array, depth + 1) for _ in range(count)]
    return values if keep_array else ArraySummary(elem_type, count)


def _parse(reader: HeaderReader, source: str) -> GGUFInfo:
    magic = reader.take(4, "the magic number")
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{source} is not a GGUF file (it starts with {magic!r}, not b'GGUF'); "
                        "give a .gguf model file.")
    version = reader.unpack("<I", "the version")
    if version not in (2, 3):
        raise GGUFError(f"{source} is GGUF version {version}; only versions 2 and 3 are supported. "
                        "Use a newer conversion of this model.")
    n_tensors, n_kv = reader.unpack("<Q", "the tensor count"), reader.unpack("<Q", "the metadata count")
    # Each kv pair needs >= 13 bytes and each tensor info >= 28, so larger counts are corruption.
    if n_kv * 13 > reader.remaining() or n_tensors * 28 > reader.remaining():
        raise GGUFError(f"{source}: the header claims {n_tensors} tensors and {n_kv} metadata entries, "
                        "more than the file can hold; it is corrupt.")
    metadata: dict[str, Any] = {}
    for _ in range(n_kv):
        key = reader.string("a metadata key", cap=_MAX_KEY)
        value_type = reader.unpack("<I", f"the type of '{key}'")
        keep = not key.startswith("tokenizer.ggml.") or key in _KEPT_TOKENIZER_ARRAYS
        value = _read_value(reader, value_type, key, keep)
        if isinstance(value, list) and len(value) > 64 and key not in _KEPT_TOKENIZER_ARRAYS:
            value = ArraySummary(value_type, len(value))
        metadata[key] = value
    tensors = [_read_tensor(reader, source) for _ in range(n_tensors)]
    alignment = metadata.get("general.alignment", 32)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(f"{source}: general.alignment is {alignment!r}, not a power of two; the header is corrupt.")
    data_offset = -(-reader.pos // alignment) * alignment
    info = GGUFInfo(source=source, version=version, metadata=metadata, tensors=tensors,
                    data_offset=data_offset, file_size=reader.file_size)
    _check_tensors(info, alignment)
    _derive(info)
    info.tokenizer_fingerprint = _fingerprint(metadata)
    for key in _KEPT_TOKENIZER_ARRAYS:  # kept only to fingerprint; summarize to keep the object small
        if isinstance(metadata.get(key), list):
            metadata[key] = ArraySummary(GGUF_STRING if key.endswith("tokens") else GGUF_INT32, len(metadata[key]))
    return info


_KEPT_TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type")


def _read_tensor(reader: HeaderReader, source: str) -> TensorInfo:
    name = reader.string("a tensor name", cap=_MAX_KEY)
    n_dims = reader.unpack("<I", f"the rank of tensor '{name}'")
    if not 1 <= n_dims <= _MAX_DIMS:
        raise GGUFError(f"{source}: tensor '{name}' has {n_dims} dimensions; the header is corrupt.")
    shape = list(struct.unpack(f"<{n_dims}Q", reader.take(8 * n_dims, f"the shape of '{name}'")))
    ggml_type = reader.unpack("<I", f"the type of tensor '{name}'")
    offset = reader.unpack("<Q", f"the offset of tensor '{name}'")
    if ggml_type not in GGML_TYPES:
        raise GGUFError(f"{source}: tensor '{name}' has unknown ggml type {ggml_type}; the file is corrupt or "
                        "needs a newer llama.cpp.")
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    _, block, size = GGML_TYPES[ggml_type]
    if n_elements == 0 or n_elements >= 1 << 62 or shape[0] % block:
        raise GGUFError(f"{source}: tensor '{name}' has an impossible shape {shape} for its type; "
                        "the header is corrupt.")
    return TensorInfo(name, shape, ggml_type, offset, n_elements // block * size)


def _check_tensors(info: GGUFInfo, alignment: int) -> None:
    for tensor in info.tensors:
        if tensor.offset % alignment:
            raise GGUFError(f"{info.source}: tensor '{tensor.name}' is not aligned; the header is corrupt.")
        end = info.data_offset + tensor.offset + tensor.n_bytes
        if info.file_size is not None and end > info.file_size:
            raise GGUFError(f"{info.source}: tensor '{tensor.name}' ends at byte {end}, past the end of the "
                            f"file ({info.file_size} bytes); the file is truncated. Download it again.")


def _fingerprint(metadata: dict[str, Any]) -> str | None:
    tokens = metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return None
    digest = hashlib.sha256()
    digest.update(str(metadata.get("tokenizer.ggml.model", "")).encode("utf-8", "replace") + b"\0")
    for text in tokens:  # length-prefixed so that token boundaries are part of the hash
        raw = str(text).encode("utf-8", "replace")
        digest.update(struct.pack("<I", len(raw)) + raw)
    types = metadata.get("tokenizer.ggml.token_type")
    if isinstance(types, list):
        digest.update(struct.pack(f"<{len(types)}I", *(int(t) & 0xFFFFFFFF for t in types)))
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        value = metadata.get(key)
        digest.update(struct.pack("<q", int(value) if isinstance(value, int) else -1))
    return digest.hexdigest()


def read_gguf(path: str | Path, header_limit: int = DEFAULT_HEADER_LIMIT) -> GGUFInfo:
    """Parse the header of a local GGUF file (reads only the header bytes)."""
    with file_reader(Path(path), header_limit) as reader:
        return _parse(reader, str(path))


def is_embedding_model(path: Path) -> bool:
    """Whether the GGUF at `path` is an embedding model (it writes no text: lists to chat with leave it out);
    its header is read once per version of the file. A file that does not read is not called one."""
    try:
        info = path.stat()
    except OSError:
        return False
    return _embeds(str(path), info.st_size, info.st_mtime_ns)


@functools.lru_cache(maxsize=512)
def _embeds(path: str, _size: int, _mtime_ns: int) -> bool:
    try:
        info = read_gguf(path)
    except (LocalchatError, OSError, ValueError):
        return False
    return pooling_key(info.arch) in info.metadata


def read_model(path: str | Path, header_limit: int = DEFAULT_HEADER_LIMIT) -> GGUFInfo:
    """A model's header from its file, or from every part of a split model (given its first part): the first
    part's metadata with all the parts' tensors, and file_size the parts' sum."""
    paths = part_paths(Path(path))
    info = read_gguf(paths[0], header_limit)
    for part in paths[1:]:
        more = read_gguf(part, header_limit)
        info.tensors += more.tensors
        info.file_size = None if info.file_size is None or more.file_size is None else info.file_size + more.file_size
    return info


def read_gguf_remote(fetch: Callable[[int, int], bytes], file_size: int | None, source: str,
                     header_limit: int = DEFAULT_HEADER_LIMIT) -> GGUFInfo:
    """Parse a GGUF header from anywhere `fetch(start, end)` reads bytes (the hub's byte ranges)."""
    return _parse(HeaderReader(fetch, file_size, header_limit, source), source)
