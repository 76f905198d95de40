"""Text to tokens and back in a llama.cpp vocabulary, for the parts that hold one (a worker, a grammar)."""

from __future__ import annotations

import ctypes

import llama_cpp


def tokenize(vocab: llama_cpp.llama_vocab_p, text: str | bytes, add_special: bool, parse_special: bool) -> list[int]:
    """Token ids of `text` (str, or UTF-8 bytes, which may end inside a character) in a llama.cpp vocabulary."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    capacity = len(data) + 8
    buf = (llama_cpp.llama_token * capacity)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, capacity, add_special, parse_special)
    if n < 0:  # buffer too small: llama.cpp says how many it needs
        capacity = -n
        buf = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, capacity, add_special, parse_special)
    return list(buf[:n])


def token_piece(vocab: llama_cpp.llama_vocab_p, token: int) -> bytes:
    """A token's bytes as llama.cpp's grammar reads them (special tokens as their text)."""
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    if n < 0:
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, True)
    return buf.raw[:n]
