"""Streamed text cut at a family's markers: each feed returns plain text and whole markers, holding back
an end that may still become a marker, so a parser above never sees half of one."""

from __future__ import annotations

from typing import Iterable


class Marker(str):
    """One of the markers, written whole."""


class MarkerStream:
    """Feed text in any pieces; get it back as str (text) and Marker items, in order."""

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers = tuple(sorted(set(filter(None, markers)), key=len, reverse=True))  # longest first
        self._held = ""

    def feed(self, text: str) -> list[str]:
        items: list[str] = []
        held = self._held + text
        pos = 0
        while True:
            at, marker = self._next(held, pos)
            if marker is None:
                break
            if at > pos:
                items.append(held[pos:at])
            items.append(Marker(marker))
            pos = at + len(marker)
        rest = held[pos:]
        keep = max((_partial_suffix(rest, m) for m in self.markers), default=0)
        if len(rest) > keep:
            items.append(rest[:len(rest) - keep])
        self._held = rest[len(rest) - keep:]
        return items

    def finish(self) -> list[str]:
        """What was held back, as text (the answer ended inside what might have been a marker)."""
        held, self._held = self._held, ""
        return [held] if held else []

    @property
    def held(self) -> str:
        return self._held

    def _next(self, text: str, pos: int) -> tuple[int, str | None]:
        """The earliest marker at or after `pos` (the longest of those starting there)."""
        best, found = len(text), None
        for marker in self.markers:
            at = text.find(marker, pos, best + len(marker))
            if 0 <= at < best:
                best, found = at, marker
        return best, found


def _partial_suffix(text: str, marker: str) -> int:
    """The length of the longest end of `text` that begins `marker`."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
