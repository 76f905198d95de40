"""Bytes to text: a BOM, UTF-8, an HTML meta charset, then Latin-1 (which reads anything, with a warning)."""

from __future__ import annotations

import re

BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def decode_bom(data: bytes) -> str | None:
    """The text after a byte-order mark; None when `data` starts with none."""
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"),
                       (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            # A cut at an arbitrary byte may split a character; ignore only that tail.
            return data.decode(codec, errors="ignore")
    return None


def decode_text(name: str, data: bytes, *, html: bool = False) -> tuple[str, list[str]]:
    """Decode text bytes (BOM, UTF-8, an HTML meta charset, then Latin-1); return text and warnings."""
    warnings: list[str] = []
    text = None
    if data.startswith(BOMS):
        text = decode_bom(data)
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if text is None and html:
        text = _decode_meta_charset(data)
    if text is None:
        text = data.decode("latin-1")
        warnings.append(f"{name}: is not UTF-8; read it as Latin-1, so some characters may be wrong. "
                        "Save it as UTF-8 to be sure.")
    return text.replace("\r\n", "\n").replace("\r", "\n"), warnings


def _decode_meta_charset(data: bytes) -> str | None:
    match = re.search(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:4096], re.I)
    if not match:
        return None
    try:
        return data.decode(match.group(1).decode("ascii"))
    except (LookupError, UnicodeDecodeError):
        return None
