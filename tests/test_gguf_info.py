"""GGUF header reading: exact facts from the real file, a header read in growing ranges (over HTTP), and fuzzing
for typed errors."""

from __future__ import annotations

import http.server
import random
import struct
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from localchat.errors import DownloadError, ModelLoadError
from localchat.models.gguf_bytes import HeaderReader
from localchat.models.gguf_info import DEFAULT_HEADER_LIMIT, GGUFError, GGUFInfo, _block_index, _parse, read_gguf


# --- a tiny GGUF writer, so the fuzz corpus is small and every byte of it is known -------------

def _str(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value_type: int, payload: bytes) -> bytes:
    return _str(key) + struct.pack("<I", value_type) + payload


def _small_gguf(n_vocab: int = 40, version: int = 3) -> bytes:
    tokens = [f"tok{i}" for i in range(n_vocab)]
    kvs = [
        _kv("general.architecture", 8, _str("llama")),
        _kv("general.alignment", 4, struct.pack("<I", 32)),
        _kv("general.file_type", 4, struct.pack("<I", 7)),
        _kv("llama.block_count", 4, struct.pack("<I", 2)),
        _kv("llama.embedding_length", 4, struct.pack("<I", 64)),
        _kv("llama.attention.head_count", 4, struct.pack("<I", 4)),
        _kv("llama.attention.head_count_kv", 9, struct.pack("<IQ", 4, 2) + struct.pack("<2i", 2, 1)),
        _kv("llama.context_length", 4, struct.pack("<I", 2048)),
        _kv("llama.rope.freq_base", 6, struct.pack("<f", 10000.0)),
        _kv("tokenizer.ggml.model", 8, _str("gpt2")),
        _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, n_vocab) + b"".join(_str(t) for t in tokens)),
        _kv("tokenizer.ggml.token_type", 9, struct.pack("<IQ", 5, n_vocab) + struct.pack(f"<{n_vocab}i", *[1] * n_vocab)),
        _kv("tokenizer.ggml.merges", 9, struct.pack("<IQ", 8, 3) + _str("a b") + _str("c d") + _str("e f")),
        _kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 1)),
        _kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 2)),
        _kv("general.flag", 7, b"\x01"),
    ]
    tensors, offset, data = [], 0, b""
    for name, shape, ggml_type, n_bytes in [("token_embd.weight", (64, n_vocab), 0, 64 * n_vocab * 4),
                                            ("blk.0.attn_q.weight", (64, 64), 8, 64 * 64 // 32 * 34),
                                            ("blk.1.attn_q.weight", (64, 64), 1, 64 * 64 * 2)]:
        tensors.append(_str(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *shape)
                       + struct.pack("<IQ", ggml_type, offset))
        padded = -(-n_bytes // 32) * 32
        data += b"\0" * padded
        offset += padded
    header = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    return header + b"\0" * (-len(header) % 32) + data


def _write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- facts --------------------------------------------------------------------------------------

def test_real_file_facts_match_the_reference_reader(model_path: Path):
    gguf = pytest.importorskip("gguf")
    info = read_gguf(model_path)
    assert (info.arch, info.n_layer, info.n_head, info.n_head_kv, info.head_dim) == ("llama", 30, 9, 3, 64)
    assert (info.n_embd, info.context_length, info.vocab_size, info.quant) == (576, 8192, 49152, "Q4_1")
    reference = gguf.GGUFReader(str(model_path))
    by_name = {t.name: t for t in info.tensors}
    assert len(by_name) == len(reference.tensors)
    for tensor in reference.tensors:
        mine = by_name[tensor.name]
        assert mine.n_bytes == int(tensor.n_bytes) and info.data_offset + mine.offset == int(tensor.data_offset)
    # The tensors account for the whole file after the header, bar alignment padding.
    assert 0 <= model_path.stat().st_size - info.data_offset - info.tensor_bytes < 32 * len(info.tensors)
    outside = sum(t.n_bytes for t in info.tensors if _block_index(t.name) is None)  # embedding, head, norm
    assert sum(info.layer_bytes()) + outside == info.tensor_bytes
    assert len(set(info.layer_bytes())) == 1  # every llama block has the same tensors


def test_small_file_facts_and_per_layer_kv_heads(tmp_path: Path):
    info = read_gguf(_write(tmp_path, _small_gguf()))
    assert (info.n_layer, info.n_head, info.n_head_kv, info.head_dim, info.quant) == (2, 4, 2, 16, "Q8_0")
    assert info.layer_bytes() == [64 * 64 // 32 * 34, 64 * 64 * 2]
    assert info.metadata["general.flag"] is True and info.bos_token_id == 1 and info.eos_token_id == 2


def test_fingerprint_depends_on_the_vocabulary_only(tmp_path: Path):
    base = read_gguf(_write(tmp_path, _small_gguf(), "a.gguf")).tokenizer_fingerprint
    v2 = read_gguf(_write(tmp_path, _small_gguf(version=2), "b.gguf")).tokenizer_fingerprint
    other = read_gguf(_write(tmp_path, _small_gguf(n_vocab=41), "c.gguf")).tokenizer_fingerprint
    assert base == v2 and base != other and len(base) == 64


# --- remote -------------------------------------------------------------------------------------
# The parser asks its HeaderReader for a growing prefix; over HTTP range requests (the file's size
# learnt from the answers) the tests see every fetch, and so how little of a file the header costs.

def read_gguf_url(url: str) -> GGUFInfo:
    """Parse the header of a remote GGUF through HTTP range requests, the file's size learnt from the answers."""
    def fetch(start: int, end: int) -> bytes:
        request = urllib.request.Request(url, headers={"Range": f"bytes={start}-{end - 1}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                total = response.headers.get("Content-Range", "").rsplit("/", 1)[-1]
                if response.status == 206 and total.isdigit():
                    reader.file_size = int(total)
                    return response.read(end - start)
                # A server that ignores Range sends the whole file from byte 0: read only the prefix.
                if response.headers.get("Content-Length", "").isdigit():
                    reader.file_size = int(response.headers["Content-Length"])
                return response.read(end)[start:]
        except urllib.error.HTTPError as exc:
            raise DownloadError(f"reading {url} failed with HTTP {exc.code}") from None

    reader = HeaderReader(fetch, None, DEFAULT_HEADER_LIMIT, url)
    return _parse(reader, url)


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    sent: list[int] = []
    honour_range = True

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        header = self.headers.get("Range", "")
        if self.honour_range and header.startswith("bytes="):
            start_text, end_text = header[6:].split("-")
            start, end = int(start_text), min(int(end_text), len(data) - 1)
            body = data[start:end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
            self.sent.append(len(body))
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _RangeHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _RangeHandler.sent.clear()
    _RangeHandler.honour_range = True
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_remote_header_equals_local_and_reads_only_the_header(server: str, model_path: Path):
    data = model_path.read_bytes()
    _RangeHandler.files = {"/m.gguf": data}
    remote, local = read_gguf_url(server + "/m.gguf"), read_gguf(model_path)
    assert remote.tokenizer_fingerprint == local.tokenizer_fingerprint
    assert [(t.name, t.offset, t.n_bytes) for t in remote.tensors] == [(t.name, t.offset, t.n_bytes) for t in local.tensors]
    assert remote.file_size == len(data)
    assert len(_RangeHandler.sent) >= 2  # the range grew
    assert sum(_RangeHandler.sent) < 4 * local.data_offset < len(data)


def test_remote_server_without_ranges_and_missing_files(server: str, tmp_path: Path):
    _RangeHandler.files = {"/s.gguf": _small_gguf()}
    _RangeHandler.honour_range = False
    assert read_gguf_url(server + "/s.gguf").n_layer == 2
    with pytest.raises(DownloadError, match="404"):
        read_gguf_url(server + "/missing.gguf")
    with pytest.raises(GGUFError):
        _RangeHandler.files["/t.gguf"] = _small_gguf()[:100]
        read_gguf_url(server + "/t.gguf")


# --- garbage ------------------------------------------------------------------------------------

def _parses_or_fails_cleanly(path: Path) -> None:
    try:
        read_gguf(path)
    except ModelLoadError as exc:
        assert str(exc)  # a message, never an empty error


def test_not_gguf_and_old_versions_say_so(tmp_path: Path):
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_gguf(_write(tmp_path, b"PK\x03\x04" + b"\0" * 100))
    with pytest.raises(GGUFError, match="version 1"):
        read_gguf(_write(tmp_path, b"GGUF" + struct.pack("<I", 1) + b"\0" * 64))
    with pytest.raises(GGUFError, match="truncated"):
        read_gguf(_write(tmp_path, b"GG"))
    with pytest.raises(ModelLoadError):
        read_gguf(tmp_path / "absent.gguf")


def test_huge_counts_and_lengths_are_rejected_without_allocating(tmp_path: Path):
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1)
    with pytest.raises(GGUFError, match="cannot fit"):
        read_gguf(_write(tmp_path, head + struct.pack("<Q", 1 << 60) + b"k" * 32))
    array = head + _str("a") + struct.pack("<IIQ", 9, 4, 1 << 40)
    with pytest.raises(GGUFError, match="more than the file holds"):
        read_gguf(_write(tmp_path, array + b"\0" * 64))
    with pytest.raises(GGUFError, match="more than the file can hold"):
        read_gguf(_write(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 1 << 50, 1 << 50)))


def test_every_truncation_of_a_small_file_fails_cleanly(tmp_path: Path):
    data = _small_gguf()
    header_end = read_gguf(_write(tmp_path, data, "whole.gguf")).data_offset
    # Header cuts are truncated reads; data cuts leave tensors pointing past the end.
    for cut in [*range(0, header_end + 1, 2), *range(header_end + 1, len(data), 401)]:
        with pytest.raises(GGUFError):
            read_gguf(_write(tmp_path, data[:cut]))


def test_truncations_of_the_real_header_fail_cleanly(tmp_path: Path, model_path: Path):
    info = read_gguf(model_path)
    with model_path.open("rb") as handle:
        prefix = handle.read(info.data_offset + 4096)
    rng = random.Random(4)
    cuts = sorted({0, 3, 4, 8, 23, 24} | {rng.randrange(info.data_offset) for _ in range(20)})
    for cut in cuts:
        with pytest.raises(GGUFError):
            read_gguf(_write(tmp_path, prefix[:cut]))
    # Header whole but tensor data cut off: the tensors point past the end.
    with pytest.raises(GGUFError, match="past the end"):
        read_gguf(_write(tmp_path, prefix))


def test_random_bytes_and_bit_flips_never_crash(tmp_path: Path):
    rng = random.Random(11)
    data = _small_gguf()
    for _ in range(200):
        _parses_or_fails_cleanly(_write(tmp_path, b"GGUF" + rng.randbytes(rng.randrange(0, 600))))
        flipped = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        _parses_or_fails_cleanly(_write(tmp_path, bytes(flipped)))
        # Counts and lengths are where corruption hurts: overwrite a whole 8-byte field.
        at = rng.randrange(24, len(data) - 8)
        smashed = data[:at] + struct.pack("<Q", rng.choice([1 << 63, 1 << 33, 2 ** 64 - 1, rng.randrange(1 << 20)])) + data[at + 8:]
        _parses_or_fails_cleanly(_write(tmp_path, smashed))
