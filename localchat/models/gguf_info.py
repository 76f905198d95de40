"""GGUF headers (v2/v3), read from a local file or over HTTP range requests, for exact model facts."""

from __future__ import annotations

import hashlib
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import DownloadError, ModelLoadError

# ggml type id -> (name, elements per block, bytes per block); mirrors ggml's type traits.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
# llama_ftype (general.file_type) -> the quant name used in file names.
FILE_TYPES: dict[int, str] = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}
# GGUF metadata value types: id -> struct format of a scalar (8 string, 9 array handled apart).
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_MAGIC = b"GGUF"
_MAX_KEY = 1 << 16          # no real key is longer; a larger length means a corrupt file
_MAX_DIMS = 4               # GGML_MAX_DIMS
DEFAULT_HEADER_LIMIT = 64 << 20  # real headers are a few MB (vocab arrays); more means corruption
_MAX_VOCAB = 1 << 22        # token arrays beyond this are corruption, and would cost GBs as Python objects


class GGUFError(ModelLoadError):
    """The bytes are not a well-formed GGUF header (wrong magic, truncated, corrupt, unsupported)."""


@dataclass(slots=True)
class TensorInfo:
    """One tensor's entry in the header: name, shape, ggml type, offset in the data section, bytes."""

    name: str
    shape: list[int]
    ggml_type: int
    offset: int
    n_bytes: int

    @property
    def type_name(self) -> str:
        entry = GGML_TYPES.get(self.ggml_type)
        return entry[0] if entry else f"type {self.ggml_type}"


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

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def layer_bytes(self) -> list[int]:
        """Weight bytes of each repeating block (blk.N.*), index N."""
        sizes = [0] * self.n_layer
        for tensor in self.tensors:
            index = _block_index(tensor.name)
            if index is not None and index < len(sizes):
                sizes[index] += tensor.n_bytes
        return sizes

    def non_layer_bytes(self) -> int:
        """Bytes outside the repeating blocks: token embedding, output head, final norm."""
        return sum(t.n_bytes for t in self.tensors if _block_index(t.name) is None)


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


def _block_index(name: str) -> int | None:
    if not name.startswith("blk."):
        return None
    number = name[4:].split(".", 1)[0]
    return int(number) if number.isdigit() else None


class _Reader:
    """Sequential reads over a growing prefix of the file; `fetch(start, end)` returns those bytes."""

    def __init__(self, fetch: Callable[[int, int], bytes], file_size: int | None, limit: int, what: str):
        self._fetch, self.file_size, self._limit, self._what = fetch, file_size, limit, what
        self.buf = b""
        self.pos = 0

    def remaining(self) -> int:
        """Bytes the header may still use: up to the end of the file and within the header limit."""
        end = self._limit if self.file_size is None else min(self.file_size, self._limit)
        return max(0, end - self.pos)

    def ensure(self, end: int, context: str) -> None:
        """Make bytes [0, end) available, fetching a geometrically larger prefix when needed."""
        if end <= len(self.buf):
            return
        if self.file_size is not None and end > self.file_size:
            raise GGUFError(f"{self._what} ends at byte {self.file_size} while reading {context}: the file is "
                            "truncated or corrupt. Download it again.")
        if end > self._limit:
            raise GGUFError(f"{self._what}: the header is larger than {self._limit >> 20} MiB at {context}; "
                            "it is corrupt or not a model this reader supports.")
        target = min(max(end, 2 * len(self.buf), 1 << 18), self._limit)
        if self.file_size is not None:
            target = min(target, self.file_size)
        self.buf += self._fetch(len(self.buf), target)
        if end > len(self.buf):
            raise GGUFError(f"{self._what} ends at byte {len(self.buf)} while reading {context}: the file "
                            "is truncated. Download it again.")

    def take(self, n: int, context: str) -> bytes:
        self.ensure(self.pos + n, context)
        start, self.pos = self.pos, self.pos + n
        return self.buf[start:self.pos]

    def unpack(self, fmt: str, context: str) -> Any:
        size = struct.calcsize(fmt)
        self.ensure(self.pos + size, context)
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self, context: str, cap: int | None = None, decode: bool = True) -> str | None:
        length = self.unpack("<Q", context)
        if length > self.remaining() or (cap is not None and length > cap):
            raise GGUFError(f"{self._what}: a string of {length} bytes in {context} cannot fit the file; "
                            "the header is corrupt.")
        if not decode:
            self.ensure(self.pos + length, context)
            self.pos += length
            return None
        return self.take(length, context).decode("utf-8", errors="replace")


def _read_value(reader: _Reader, value_type: int, key: str, keep_array: bool, depth: int = 0) -> Any:
    if value_type in _SCALARS:
        return reader.unpack(_SCALARS[value_type], key)
    if value_type == 8:
        return reader.string(key)
    if value_type != 9 or depth > 1:
        raise GGUFError(f"{reader._what}: unknown value type {value_type} for '{key}'; the header is corrupt.")
    elem_type, count = reader.unpack("<I", key), reader.unpack("<Q", key)
    elem_size = struct.calcsize(_SCALARS[elem_type]) if elem_type in _SCALARS else 8
    if count * elem_size > reader.remaining():
        raise GGUFError(f"{reader._what}: the array '{key}' claims {count} elements, more than the file holds; "
                        "the header is corrupt.")
    if keep_array and count > _MAX_VOCAB:
        raise GGUFError(f"{reader._what}: the array '{key}' claims {count} elements; the header is corrupt.")
    if elem_type in _SCALARS:
        raw = reader.take(count * elem_size, key)
        if not keep_array or count > 64 and key not in _KEPT_TOKENIZER_ARRAYS:
            return ArraySummary(elem_type, count)
        return list(struct.unpack(f"<{count}{_SCALARS[elem_type][1]}", raw))
    if elem_type == 8 and not keep_array:  # merges: walk the lengths, skip the text
        for _ in range(count):
            reader.string(key, decode=False)
        return ArraySummary(elem_type, count)
    values = [_read_value(reader, elem_type, key, keep_array, depth + 1) for _ in range(count)]
    return values if keep_array else ArraySummary(elem_type, count)


def _parse(reader: _Reader, source: str) -> GGUFInfo:
    magic = reader.take(4, "the magic number")
    if magic != _MAGIC:
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
            metadata[key] = ArraySummary(8 if key.endswith("tokens") else 5, len(metadata[key]))
    return info


_KEPT_TOKENIZER_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type")


def _read_tensor(reader: _Reader, source: str) -> TensorInfo:
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
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            def fetch(start: int, end: int) -> bytes:
                handle.seek(start)
                return handle.read(end - start)
            return _parse(_Reader(fetch, size, header_limit, path.name), str(path))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path} ({exc.strerror or exc}); check the path and its permissions.") from None


def read_gguf_url(url: str, headers: dict[str, str] | None = None, timeout: float = 30.0,
                  header_limit: int = DEFAULT_HEADER_LIMIT) -> GGUFInfo:
    """Parse the header of a remote GGUF through HTTP range requests, growing the range as needed."""
    def fetch(start: int, end: int) -> bytes:
        request = urllib.request.Request(url, headers={**(headers or {}), "Range": f"bytes={start}-{end - 1}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                content_range = response.headers.get("Content-Range", "")
                total = content_range.rsplit("/", 1)[-1]
                if response.status == 206 and total.isdigit():
                    reader.file_size = int(total)
                    return response.read(end - start)
                # A server that ignores Range sends the whole file from byte 0: read only the prefix.
                if response.headers.get("Content-Length", "").isdigit():
                    reader.file_size = int(response.headers["Content-Length"])
                return response.read(end)[start:]
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"reading {url} failed with HTTP {exc.code}; check the address or your access.") from None
        except (urllib.error.URLError, OSError) as exc:
            raise DownloadError(f"cannot reach {url} ({exc}); check the network.") from None

    reader = _Reader(fetch, None, header_limit, url)
    return _parse(reader, url)
