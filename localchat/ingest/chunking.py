"""Split Documents into chunks of about N tokens on paragraph, sentence or line boundaries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

from .document import Document
from .text_sections import line_anchor

CountTokens = Callable[[str], int]

DEFAULT_CHUNK_TOKENS = 400

_PARAGRAPH = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+")
_PAGE = re.compile(r"^p\. (\d+)$")
_LINES = re.compile(r"^lines? (\d+)(?:–(\d+))?$")


def estimate_tokens(text: str) -> int:
    """A cheap token estimate: about four characters per token."""
    return (len(text) + 3) // 4


@dataclass(slots=True)
class Chunk:
    """A piece of one document, with the anchors of the sections it came from."""

    document: str
    index: int
    text: str
    anchors: list[str]
    num_tokens: int

    @property
    def label(self) -> str:
        """The anchors in short form: "p. 3", "pp. 3–4", "lines 1–80", "§ Intro, § Method"."""
        return describe_anchors(self.anchors)


@dataclass(slots=True)
class _Piece:
    text: str
    sep: str  # what joins it to the piece before it, when both land in one chunk
    anchor: str  # its section's
    num_tokens: int
    lines: tuple[int, int] | None = None  # its own first and last line, in a section cut by lines


def chunk_document(doc: Document, target_tokens: int = DEFAULT_CHUNK_TOKENS,
                   count_tokens: CountTokens = estimate_tokens) -> list[Chunk]:
    """Cut a document into chunks of at most about target_tokens, in reading order."""
    assert target_tokens > 0
    chunks: list[Chunk] = []
    current: list[_Piece] = []
    size = 0

    def flush() -> None:
        nonlocal current, size
        if not current:
            return
        text = current[0].text + "".join(
            (p.sep if p.anchor == q.anchor else "\n\n") + p.text for q, p in zip(current, current[1:]))
        anchors = _anchors(current)
        chunks.append(Chunk(doc.name, len(chunks), text, anchors, count_tokens(text)))
        current, size = [], 0

    for piece in _pieces(doc, target_tokens, count_tokens):
        new_section = bool(current) and piece.anchor != current[-1].anchor
        # Keep sections apart unless the chunk so far is small: citations stay precise.
        if current and (size + piece.num_tokens > target_tokens
                        or (new_section and size >= target_tokens // 2)):
            flush()
        current.append(piece)
        size += piece.num_tokens
    flush()
    return chunks


def _pieces(doc: Document, target: int, count: CountTokens) -> Iterator[_Piece]:
    for section in doc.sections:
        lines = _LINES.match(section.anchor)
        if lines is None:
            yield from _section_pieces(doc, section.text, section.anchor, target, count)
            continue
        # A section cut by lines: each piece names its own lines, so a chunk cites exactly the lines it holds.
        first, text, cursor = int(lines.group(1)), section.text, 0
        for piece in _section_pieces(doc, text, section.anchor, target, count):
            start = text.find(piece.text, cursor)
            if start < 0:  # not expected: every piece is a slice of its section's text
                yield piece
                continue
            cursor = start + len(piece.text)
            piece.lines = (first + text.count("\n", 0, start), first + text.count("\n", 0, cursor))
            yield piece


def _section_pieces(doc: Document, text: str, anchor: str, target: int, count: CountTokens) -> Iterator[_Piece]:
    # Code reads line by line; prose by sentence. PDF text has a newline at every
    # visual line, so lines are only a fallback there.
    by_lines = doc.kind == "source"
    for paragraph in _PARAGRAPH.split(text):
        paragraph = paragraph.strip("\n")
        if not paragraph.strip():
            continue
        tokens = count(paragraph)
        if tokens <= target:
            yield _Piece(paragraph, "\n\n", anchor, tokens)
            continue
        units, sep = _split(paragraph, by_lines)
        for unit in units:
            tokens = count(unit)
            if tokens <= target:
                yield _Piece(unit, sep, anchor, tokens)
            else:
                for part in _hard_split(unit, target, tokens):
                    yield _Piece(part, "", anchor, count(part))


def _anchors(pieces: list[_Piece]) -> list[str]:
    """A chunk's places, in order: its sections' anchors, or the very lines it holds where known (the
    lines of pieces that follow each other as one range)."""
    places: list[str | tuple[int, int]] = []
    for piece in pieces:
        last = places[-1] if places else None
        if piece.lines is not None and isinstance(last, tuple) and last[1] + 1 >= piece.lines[0]:
            places[-1] = (last[0], max(last[1], piece.lines[1]))
        else:
            places.append(piece.lines or piece.anchor)
    return list(dict.fromkeys(p if isinstance(p, str) else line_anchor(*p) for p in places))


def _split(paragraph: str, by_lines: bool) -> tuple[list[str], str]:
    if not by_lines:
        sentences = [s for s in _SENTENCE_END.split(paragraph) if s.strip()]
        if len(sentences) > 1:
            return sentences, " "
    lines = [line for line in paragraph.split("\n") if line.strip()]
    return lines, "\n"


def _hard_split(text: str, target: int, tokens: int) -> list[str]:
    """Cut text with no usable boundary into pieces of about target tokens, at spaces when possible."""
    # Width in characters from this text's own chars-per-token, with room for uneven spread.
    width = max(1, int(len(text) * target / tokens * 0.9))
    parts, start = [], 0
    while start < len(text):
        end = min(len(text), start + width)
        if end < len(text):
            space = text.rfind(" ", start + width // 2, end)
            if space > start:
                end = space + 1
        parts.append(text[start:end])
        start = end
    return parts


def describe_anchors(anchors: list[str], limit: int | None = None) -> str:
    """Join anchors for display, merging runs of pages ("pp. 3–5") and of line ranges."""
    pages = [int(m.group(1)) for a in anchors if (m := _PAGE.match(a))]
    ranges = [(int(m.group(1)), int(m.group(2) or m.group(1))) for a in anchors if (m := _LINES.match(a))]
    if pages and len(pages) == len(anchors):
        items = [f"p. {lo}" if lo == hi else f"pp. {lo}–{hi}" for lo, hi in _merge([(n, n) for n in pages])]
    elif ranges and len(ranges) == len(anchors):
        items = [f"line {lo}" if lo == hi else f"lines {lo}–{hi}" for lo, hi in _merge(ranges)]
    else:
        items = list(dict.fromkeys(anchors))
    if limit is not None and len(items) > limit:
        items = items[:limit] + [f"and {len(items) - limit} more"]
    return ", ".join(items)


def _merge(ranges: list[tuple[int, int]], gap: int = 1) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(set(ranges)):
        if merged and lo <= merged[-1][1] + gap:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    return merged
