"""Token bytes -> answer text: UTF-8 across token boundaries, stop strings held back until certain."""

from __future__ import annotations

import codecs


class TextOutput:
    """Turns a sequence's token bytes into text deltas and detects stop strings."""

    def __init__(self, stop: list[str]) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = stop
        self._held = ""  # text that might be the start of a stop string
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, data: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to show."""
        return self._release(self._decoder.decode(data))

    def finish(self) -> str:
        """Flush at the end of generation (not after a stop string: that text is dropped)."""
        if self.stopped:
            return ""
        # Bytes left undecoded are a character the answer was cut in the middle of (Max tokens): dropped, where
        # decoding them would end the answer in "\ufffd".
        self._decoder.reset()
        text, self._held = self._held, ""
        return text

    def _release(self, new: str) -> str:
        if self.stopped:
            return ""
        text = self._held + new
        if not self._stop:
            self._held = ""
            return text
        found = [(i, s) for s in self._stop if (i := text.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda hit: hit[0])
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = 0
        for stop in self._stop:  # longest tail of text that begins some stop string
            for n in range(min(len(stop) - 1, len(text)), keep, -1):
                if text.endswith(stop[:n]):
                    keep = n
                    break
        self._held = text[len(text) - keep:] if keep else ""
        return text[: len(text) - keep]
