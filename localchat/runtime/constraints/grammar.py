"""Constrained sampling: a GBNF grammar (llama.cpp's format) that the generated text must match,
from the first token or lazily (free text until a trigger string appears), and JSON schemas made
into one (schema_grammar.py) with a check of what it cannot express (schema_check.py).

sampling.Sampler holds one GrammarSampler per constrained sequence; this module says what a grammar
is, checks it, builds llama.cpp's grammar sampler from it and picks tokens under it.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np

from ...errors import RequestError
from .. import llama_log
from ..vocab import token_piece
from .lazy_trigger import TriggerWatch, grammar_takes, trigger_patterns

log = logging.getLogger(__name__)

MAX_GBNF_CHARS = 256 * 1024  # a grammar is request data: bound what parsing one may cost
# llama.cpp parses a grammar's groups by recursion on the calling thread's stack: about 20,000 nested
# parentheses overflow it and kill the process. A grammar a person or a schema writes nests a few levels.
MAX_GBNF_NESTING = 256
MAX_TRIGGERS = 16
MAX_TRIGGER_CHARS = 256


@dataclass(frozen=True, slots=True)
class Grammar:
    """`gbnf`: the grammar, whose `root` rule the output must match.

    `triggers` empty: constrained from the first token. Otherwise lazy: free text until one of the
    trigger strings has been generated; from the start of that string on, the text must match
    `root` (llama.cpp feeds the grammar the trigger itself, so `root` begins with it)."""

    gbnf: str
    triggers: tuple[str, ...] = ()
    # What the grammar cannot express, checked on the finished answer (a resample.AnswerCheck):
    # the engine resamples an answer that fails it.
    check: Any = field(default=None, compare=False, repr=False)
    # A thinking model's thinking comes first: a trigger counts only after it (api/thinking.py's after_thinking,
    # an ECMAScript pattern of our own making, never a client's).
    after: str = ""

    def validate(self) -> None:
        """Raise RequestError for a grammar too large to take, or malformed triggers."""
        if not isinstance(self.gbnf, str) or not self.gbnf.strip():
            raise RequestError("the grammar is empty; give GBNF text with a `root` rule.", "grammar")
        if len(self.gbnf) > MAX_GBNF_CHARS:
            raise RequestError(f"the grammar is {len(self.gbnf)} characters; use at most {MAX_GBNF_CHARS}.",
                               "grammar")
        depth = nesting(self.gbnf)
        if depth > MAX_GBNF_NESTING:
            raise RequestError(f"the grammar nests groups {depth} levels deep; use at most {MAX_GBNF_NESTING} (give "
                               "a deep part a rule of its own).", "grammar")
        if len(self.triggers) > MAX_TRIGGERS:
            raise RequestError(f"{len(self.triggers)} grammar triggers given; use at most {MAX_TRIGGERS}.",
                               "grammar")
        if not all(isinstance(t, str) and 0 < len(t) <= MAX_TRIGGER_CHARS for t in self.triggers):
            raise RequestError(f"grammar triggers must be strings of 1 to {MAX_TRIGGER_CHARS} characters.",
                               "grammar")


def nesting(gbnf: str) -> int:
    """How deep the grammar's parenthesised groups nest (parentheses in strings, character classes and
    comments do not count), in one pass."""
    depth = deepest = 0
    quote: str | None = None  # the closing character of the string or class being read
    i = 0
    while i < len(gbnf):
        char = gbnf[i]
        if quote is not None:
            if char == "\\":
                i += 1  # an escaped character, whatever it is
            elif char == quote:
                quote = None
        elif char == '"':
            quote = '"'
        elif char == "[":
            quote = "]"
        elif char == "#":
            end = gbnf.find("\n", i)
            i = len(gbnf) if end < 0 else end
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
        i += 1
    return deepest


def new_grammar_sampler(grammar: Grammar, vocab: llama_cpp.llama_vocab_p) -> llama_cpp.llama_sampler_p:
    """llama.cpp's grammar sampler for `grammar`; RequestError when llama.cpp cannot parse it."""
    grammar.validate()
    llama_log.install()
    llama_log.recent_problems.clear()
    text, root = grammar.gbnf.encode("utf-8"), b"root"
    if grammar.triggers:
        # A trigger is plain text: escaped into the whole-buffer pattern llama.cpp matches, whose
        # first group marks where the constrained text starts.
        patterns = [p.encode("utf-8") for p in trigger_patterns(grammar.triggers, grammar.after)]
        array = (ctypes.c_char_p * len(patterns))(*patterns)
        sampler = llama_cpp.llama_sampler_init_grammar_lazy_patterns(vocab, text, root, array, len(patterns), None, 0)
    else:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, text, root)
    if not sampler:
        reason = "; ".join(p for p in llama_log.recent_problems if p) or "llama.cpp gave no reason"
        raise RequestError(f"the grammar could not be used ({reason[:500]}); check its GBNF: it needs a "
                           "`root` rule, and every rule it names must be defined.", "grammar")
    return sampler


# The converter's string character admits raw control characters (a newline inside a string), which
# JSON forbids: the rule llama.cpp's own converter writes keeps them out.
_LOOSE_CHAR = 'char ::= [^"\\\\] |'
_JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'


def json_strings_only(gbnf: str) -> str:
    """The converter's grammar with JSON's own string characters (no raw control characters)."""
    return gbnf.replace(_LOOSE_CHAR, _JSON_CHAR)


SHORTLIST = 64  # tokens checked one by one under greedy before the whole vocabulary is masked
TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])  # llama_token_data


class GrammarSampler:
    """One sequence's grammar state. It advances only over tokens that enter the sequence: drafted
    tokens are verified by sampling each position in order, so a rejected draft never reaches it."""

    def __init__(self, grammar: Grammar, vocab: llama_cpp.llama_vocab_p, n_vocab: int, eog: int) -> None:
        self._sampler = new_grammar_sampler(grammar, vocab)
        self._gbnf = grammar.gbnf
        self._watch = TriggerWatch(grammar.triggers, grammar.after, lambda token: token_piece(vocab, token))
        self._vocab = vocab
        self._n_vocab = n_vocab
        self._eog = eog
        self._data: np.ndarray | None = None  # candidates buffer, made on first full pass
        self._one = (llama_cpp.llama_token_data * 1)()

    def pick(self, logits: np.ndarray, chain: llama_cpp.llama_sampler_p | None) -> int:
        """The next token under the grammar, which (and the chain) accepts it: greedy when `chain` is
        None, else drawn by the chain. Masking the whole vocabulary costs far more than a model step
        (tens of ms for 49k tokens), so the unconstrained pick is checked first and the mask applied
        only when the grammar refuses it, as llama.cpp's own sampler does. Under greedy that is
        exact; under sampling it differs from masking first only when the grammar refuses one of
        the chain's few surviving candidates."""
        if chain is None:
            token = int(logits.argmax())  # the argmax of the masked logits too, when the grammar allows it
            if not self.allows(token):
                token = self._best_allowed(logits)
        else:
            token = self._draw(logits, chain, masked=False)
            if not self.allows(token):
                token = self._draw(logits, chain)
            llama_cpp.llama_sampler_accept(chain, token)
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        """A token entered the sequence; an end token ends it, so the grammar need not hear of it."""
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            return
        fed = self._watch.fed_by(token)
        if fed is not None and not self._watch.is_bare_trigger(fed) and not grammar_takes(self._gbnf, self._vocab, fed):
            # The trigger came inside text the grammar cannot read (the answer names a marker in prose):
            # handed on, llama.cpp would throw and abort the process. The text stays the answer's own.
            log.info("the answer wrote a grammar trigger inside other text (%r); it is read as text and the "
                     "grammar waits for its trigger again", fed[:80])
            llama_cpp.llama_sampler_reset(self._sampler)
            self._watch.restart()
            return
        llama_cpp.llama_sampler_accept(self._sampler, token)
        self._watch.accepted(token)

    def allows(self, token: int) -> bool:
        """Whether the grammar lets `token` come next."""
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        array = llama_cpp.llama_token_data_array(self._one, 1, -1, False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        return self._one[0].logit != -np.inf

    def _best_allowed(self, logits: np.ndarray) -> int:
        """The greedy pick under the grammar: the likeliest few tokens are checked in one call, and
        the whole vocabulary is masked only when none of them is allowed. Exact: every token more
        likely than the one found is among those checked and refused."""
        top = np.argpartition(logits, -SHORTLIST)[-SHORTLIST:]
        top = top[np.lexsort((top, -logits[top]))]  # likeliest first; equal logits: lowest id, as argmax
        data = np.zeros(SHORTLIST, dtype=TOKEN_DATA)
        data["id"], data["logit"] = top, logits[top]
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
                                                 SHORTLIST, -1, False)
        llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
        allowed = np.flatnonzero(np.isfinite(data["logit"]))
        # A token outside the list may tie the last one checked (and have a lower id): mask all then.
        if allowed.size and logits[top[allowed[0]]] > logits[top[-1]]:
            return int(top[allowed[0]])
        return self._draw(logits, None)

    def _draw(self, logits: np.ndarray, chain: llama_cpp.llama_sampler_p | None, masked: bool = True) -> int:
        """The chain's pick (argmax when None) over the whole vocabulary, masked by the grammar or not."""
        if self._data is None:
            self._data = np.zeros(self._n_vocab, dtype=TOKEN_DATA)
        data = self._data
        data["id"] = np.arange(self._n_vocab, dtype=np.int32)  # a chain may have reordered the last pass
        data["logit"] = logits
        data["p"] = 0.0
        array = llama_cpp.llama_token_data_array(data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
                                                 self._n_vocab, -1, False)
        if masked:
            llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(array))
            if not np.isfinite(data["logit"]).any():
                # A grammar that no token can continue: end the answer rather than break the grammar.
                log.warning("the grammar allows no next token; the answer ends here")
                return self._eog
        if chain is None:
            return int(data["id"][int(data["logit"].argmax())])
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
        return int(array.data[array.selected].id)

    def close(self) -> None:
        if self._sampler is not None:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None
