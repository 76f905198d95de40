"""A checkpoint's tokenizer.json (the `tokenizers` package) with the engine's vocabulary calls."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from ..errors import ModelLoadError


@lru_cache(maxsize=1)
def byte_level_table() -> dict[str, int]:
    """Byte-level BPE's characters -> bytes: printable bytes stand for themselves, the other bytes
    for the characters from U+0100 on, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _token_name(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


class CheckpointTokenizer:
    """Token ids <-> text for one checkpoint, special tokens and end-of-generation ids included."""

    def __init__(self, folder: Path, config: dict[str, Any]) -> None:
        try:
            self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
            raw = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
            settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except Exception as exc:  # the tokenizers package raises its own exception type
            raise ModelLoadError(f"the checkpoint's tokenizer in {folder} does not load ({exc}); "
                                 "download tokenizer.json again.") from None
        self._plain = Tokenizer.from_str(self._tok.to_str())
        self._plain.encode_special_tokens = True  # message text never becomes control tokens
        self.byte_level = (raw.get("decoder") or {}).get("type") == "ByteLevel"
        self.n_vocab = max(self._tok.get_vocab_size(with_added_tokens=True), config.get("vocab_size", 0))
        self.special = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        self.chat_template = settings.get("chat_template")
        if isinstance(self.chat_template, list):  # named templates: the default one
            named = {t.get("name"): t.get("template") for t in self.chat_template if isinstance(t, dict)}
            self.chat_template = named.get("default")
        self.bos_token = self._id(_token_name(settings.get("bos_token")), config.get("bos_token_id"))
        self.eos_token = self._id(_token_name(settings.get("eos_token")), config.get("eos_token_id"))
        self.add_bos = bool(settings.get("add_bos_token", False)) and self.bos_token >= 0
        eos_ids = config.get("eos_token_id")
        self.eog = {self.eos_token, *(eos_ids if isinstance(eos_ids, list) else [eos_ids])} - {None, -1}

    def _id(self, name: str | None, fallback: Any) -> int:
        found = self._tok.token_to_id(name) if name else None
        if found is not None:
            return found
        return fallback[0] if isinstance(fallback, list) else fallback if isinstance(fallback, int) else -1

    def encode(self, text: str, add_bos: bool, parse_special: bool) -> list[int]:
        tok = self._tok if parse_special else self._plain
        ids = tok.encode(text, add_special_tokens=False).ids
        return [self.bos_token, *ids] if add_bos else ids

    def token_text(self, token: int) -> str:
        return self._tok.id_to_token(token) or ""

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        """The raw bytes of one token; a special token's name only when `special` (as llama.cpp does)."""
        if token in self.special:
            return self.token_text(token).encode() if special else b""
        text = self.token_text(token)
        if self.byte_level:
            table = byte_level_table()
            return bytes(table[ch] for ch in text) if all(ch in table for ch in text) else text.encode()
        if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):  # SentencePiece byte fallback
            return bytes([int(text[3:5], 16)])
        return text.replace("\u2581", " ").encode()
