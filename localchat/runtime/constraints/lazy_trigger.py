"""A lazy grammar's trigger, watched beside llama.cpp's, so that no answer can make llama.cpp throw.

llama.cpp's lazy grammar keeps the text generated so far; once a trigger pattern finds the trigger in it,
it feeds the grammar at once everything from the trigger's start: the rest of the token that completed the
trigger included. Where the grammar refuses that rest (an answer naming a family's marker in its prose,
"the <tool_call></tool_call> tags", in a token such as `></`), llama.cpp throws a C++ exception through the
ctypes call, and the process aborts. The watch keeps the same text and finds the trigger the same way, so a
token whose rest the grammar refuses is never handed to llama.cpp: the grammar starts over instead, and what
the model wrote is its answer's text, as if no trigger had been written.

The patterns are anchored (`^...$`): llama.cpp matches an anchored pattern against the whole text and
searches an unanchored one anywhere, where a pattern's "only after the thinking" part would not hold.
"""

from __future__ import annotations

import ctypes
import re
from typing import Callable

import llama_cpp

from ..vocab import tokenize, token_piece


def regex_literal(text: str) -> str:
    """`text` as an ECMAScript regex (llama.cpp's std::regex) matching it literally. Only the syntax
    characters are escaped: an escape that regex does not know would throw inside llama.cpp."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in text)


def trigger_patterns(triggers: tuple[str, ...], after: str) -> list[str]:
    """The whole-text patterns llama.cpp is given for `triggers` (each counting only after `after`), whose
    first group marks where the constrained text starts."""
    return [f"^{after}[\\s\\S]*?({regex_literal(t)})[\\s\\S]*$" for t in triggers]


class TriggerWatch:
    """The text a lazy grammar has seen while it waits for its trigger, kept as llama.cpp keeps it."""

    def __init__(self, triggers: tuple[str, ...], after: str, piece: Callable[[int], bytes]) -> None:
        self._patterns = [re.compile(p.encode("utf-8")) for p in trigger_patterns(triggers, after)]
        self._triggers = [t.encode("utf-8") for t in triggers]
        self._longest = max((len(t) for t in self._triggers), default=0)
        self._piece = piece
        self._text = b""
        self.awaiting = bool(triggers)

    def fed_by(self, token: int) -> bytes | None:
        """What llama.cpp would feed the grammar at once if `token` came next: the text from the trigger's
        start on. None while the grammar would go on waiting (or waits no more)."""
        if not self.awaiting:
            return None
        piece = self._piece(token)
        text = self._text + piece
        window = text[-(len(piece) + self._longest):]  # a trigger found now overlaps the new piece
        if not any(t in window for t in self._triggers):
            return None
        for pattern in self._patterns:
            found = pattern.fullmatch(text)
            if found is not None:
                start = next((found.start(i) for i in range(1, (found.lastindex or 0) + 1)
                              if found.end(i) > found.start(i)), found.start(0))
                return text[start:]
        return None

    def accepted(self, token: int) -> None:
        """`token` was handed to llama.cpp's grammar."""
        if self.awaiting:
            fed = self.fed_by(token)
            self._text += self._piece(token)
            if fed is not None:
                self.awaiting, self._text = False, b""

    def restart(self) -> None:
        """llama.cpp's grammar was reset: it waits for its trigger again, in the text from here on."""
        self.awaiting, self._text = bool(self._triggers), b""

    def is_bare_trigger(self, fed: bytes) -> bool:
        return fed in self._triggers


def grammar_takes(gbnf: str, vocab: llama_cpp.llama_vocab_p, text: bytes) -> bool:
    """Whether the grammar `gbnf` (from its start) reads `text`: the text's tokens, each checked before it is
    accepted by a grammar of its own (a refused token accepted would throw). A text whose tokens do not
    give its bytes back is not read."""
    tokens = tokenize(vocab, text, False, True)
    if b"".join(token_piece(vocab, t) for t in tokens) != text:
        return False
    probe = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if not probe:
        return False
    try:
        one = (llama_cpp.llama_token_data * 1)()
        for token in tokens:
            one[0].id, one[0].logit, one[0].p = token, 0.0, 0.0
            array = llama_cpp.llama_token_data_array(one, 1, -1, False)
            llama_cpp.llama_sampler_apply(probe, ctypes.byref(array))
            if one[0].logit == float("-inf"):
                return False
            llama_cpp.llama_sampler_accept(probe, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(probe)

