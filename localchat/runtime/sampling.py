"""Per-request sampling: the parameters, their validation, and llama.cpp's sampler chain."""

from __future__ import annotations

import ctypes
import math
import random
from dataclasses import dataclass, field
from typing import Any, Mapping

import llama_cpp
import numpy as np

from ..errors import RequestError
from .constraints.grammar import Grammar, GrammarSampler


@dataclass(slots=True)
class SamplingParams:
    """What a request asks of the sampler. temperature 0 is greedy."""

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks)
    grammar: Grammar | None = None  # constrain the text to a GBNF grammar (grammar.py)
    logprobs: int | None = None  # None: off; 0-20: each token's log-probability and that many alternatives
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit (OpenAI's), within BIAS_RANGE

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Raise RequestError naming the bad value and its allowed range (LIMITS); `names`: what the
        caller's protocol calls a field (Ollama's num_predict for max_tokens), where it differs."""
        names = names or {}
        for name, limit in LIMITS.items():
            value = getattr(self, name)
            if value is not None and not limit.holds(value):
                shown = names.get(name, name)
                raise RequestError(f"{shown}={value!r} is invalid; use a value {limit.words()}.", shown)
        stop = names.get("stop", "stop")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise RequestError(f"{stop} strings must be non-empty strings.", stop)
        if len(self.stop) > MAX_STOPS:
            raise RequestError(f"{len(self.stop)} {stop} strings given; use at most {MAX_STOPS}.", stop)
        if self.logit_bias is not None:
            self.logit_bias = token_biases(self.logit_bias, names.get("logit_bias", "logit_bias"))


@dataclass(frozen=True, slots=True)
class Limit:
    """The values one sampling parameter takes; an open end excludes its bound."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    note: str = ""  # what special values mean
    whole: bool = False  # a count, a length or a seed: whole numbers only

    @property
    def kind(self) -> type:
        """The type a flag or a control reads its value as."""
        return int if self.whole else float

    def holds(self, value: float) -> bool:
        above = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above and below

    def words(self) -> str:
        """'between 0 and 2', 'in (0, 1]', 'at least 1 (0: off)'."""
        low, high = _number(self.low), _number(self.high)
        if self.low is not None and self.high is not None:
            text = (f"between {low} and {high}" if not (self.open_low or self.open_high) else
                    f"in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}")
        else:
            text = f"above {low}" if self.open_low else f"at least {low}"
        return f"{text} ({self.note})" if self.note else text


def _number(value: float | None) -> str:
    return str(int(value)) if value is not None and float(value).is_integer() else str(value)


# The one place sampling values are checked: the CLI's flags, the API's request bodies and the
# window's sliders all become SamplingParams, and Engine.submit validates them. Where OpenAI's API
# documents a range (temperature 0-2, penalties -2..2) it is that range; llama.cpp's own knobs keep
# what its samplers accept. An API request's top_p 0 means greedy and never reaches top_p.
LIMITS: dict[str, Limit] = {
    "temperature": Limit(0, 2, note="0: greedy"),
    "top_k": Limit(0, note="0: off", whole=True),
    "top_p": Limit(0, 1, open_low=True),
    "min_p": Limit(0, 1, open_high=True),
    "repeat_penalty": Limit(0, 10, open_low=True),
    "presence_penalty": Limit(-2, 2),
    "frequency_penalty": Limit(-2, 2),
    "penalty_last_n": Limit(-1, note="-1: the whole context, 0: off", whole=True),
    "max_tokens": Limit(1, whole=True),
    "seed": Limit(0, 2**32 - 1, whole=True),
}
MAX_STOPS = 16


MAX_LOGPROBS = 20  # alternatives per token, as OpenAI's top_logprobs
# OpenAI's logit_bias: each value within [-100, 100] (-100 bans a token, 100 all but forces it), here clamped
# to it as llama.cpp's server does; the entries bounded, as each is copied into the sampler of every request.
BIAS_RANGE = 100.0
MAX_BIASES = 1024


def token_biases(asked: Mapping[Any, Any], param: str = "logit_bias") -> dict[int, float]:
    """A logit_bias map (JSON's keys are strings) as token id -> bias, each bias clamped to BIAS_RANGE; a key that
    is no token id, a value that is no finite number or too many entries raise RequestError naming `param`."""
    if not isinstance(asked, Mapping):
        raise RequestError(f"{param} must be an object mapping token ids to biases, such as {{\"1234\": -100}}.",
                           param)
    if len(asked) > MAX_BIASES:
        raise RequestError(f"{param} has {len(asked)} entries; use at most {MAX_BIASES}.", param)
    out: dict[int, float] = {}
    for key, value in asked.items():
        token = key if isinstance(key, int) and not isinstance(key, bool) else _token_id(key)
        if token is None or token < 0:
            raise RequestError(f"{param}: {str(key)[:40]!r} is not a token id; the keys are token ids "
                               "(whole numbers from 0), as the model's tokenizer gives them.", param)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise RequestError(f"{param}: the bias of token {token} must be a number from -100 to 100 "
                               f"(got {str(value)[:40]!r}).", param)
        out[token] = max(-BIAS_RANGE, min(BIAS_RANGE, float(value)))
    return out


def _token_id(key: Any) -> int | None:
    text = key.strip() if isinstance(key, str) else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 10 else None


def logits_at(ctx: llama_cpp.llama_context_p, index: int, n_vocab: int) -> np.ndarray:
    """The raw logits of batch position `index`, in place (no copy)."""
    pointer = llama_cpp.llama_get_logits_ith(ctx, index)
    assert pointer, index  # the engine asks only for positions it requested logits of
    return np.ctypeslib.as_array(pointer, shape=(n_vocab,))


def _biases(asked: dict[int, float] | None, n_vocab: int) -> ctypes.Array | None:
    """logit_bias as llama.cpp's array; a token id past the vocabulary is a RequestError (None: no biases)."""
    if not asked:
        return None
    outside = sorted(token for token in asked if not 0 <= token < n_vocab)
    if outside:
        raise RequestError(f"logit_bias: token id {outside[0]} is not in this model's vocabulary, which has ids 0 to "
                           f"{n_vocab - 1}; take the ids from this model's tokenizer.", "logit_bias")
    array = (llama_cpp.llama_logit_bias * len(asked))()
    for entry, (token, bias) in zip(array, asked.items()):
        entry.token, entry.bias = token, bias
    return array


class Sampler:
    """A llama.cpp sampler chain (and grammar) owned by one sequence; freed with the sequence."""

    def __init__(self, params: SamplingParams, n_vocab: int, vocab: llama_cpp.llama_vocab_p | None = None,
                 eog: int = -1) -> None:
        self._chain = self._grammar = None
        if params.logprobs is not None and not (isinstance(params.logprobs, int) and 0 <= params.logprobs <= MAX_LOGPROBS):
            raise RequestError(f"logprobs={params.logprobs!r} is invalid; use 0 to {MAX_LOGPROBS} alternatives.", "logprobs")
        # First, as it may refuse the request: a grammar llama.cpp cannot parse.
        self._grammar = GrammarSampler(params.grammar, vocab, n_vocab, eog) if params.grammar is not None else None
        # Plain greedy is an argmax over the logits in place: llama.cpp's chain first copies every
        # logit into a candidate array (262k entries for Gemma, about a millisecond a token).
        penalised = params.repeat_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
        biases = _biases(params.logit_bias, n_vocab)
        self._argmax_of = n_vocab if params.greedy and not penalised and biases is None else 0
        self._n_vocab = n_vocab
        chain_params = llama_cpp.llama_sampler_chain_default_params()
        chain_params.no_perf = True
        self._chain = llama_cpp.llama_sampler_chain_init(chain_params)
        add = lambda s: llama_cpp.llama_sampler_chain_add(self._chain, s)  # noqa: E731
        if biases is not None:  # first, so every later sampler (greedy too) sees the biased logits
            add(llama_cpp.llama_sampler_init_logit_bias(n_vocab, len(biases), biases))  # llama.cpp copies them
        if penalised:
            # This llama.cpp still takes the vocabulary size first (later ones dropped it).
            add(llama_cpp.llama_sampler_init_penalties(
                n_vocab, params.penalty_last_n, params.repeat_penalty, params.frequency_penalty,
                params.presence_penalty))
        if params.greedy:
            add(llama_cpp.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                add(llama_cpp.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                add(llama_cpp.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0.0:
                add(llama_cpp.llama_sampler_init_min_p(params.min_p, 1))
            add(llama_cpp.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            add(llama_cpp.llama_sampler_init_dist(seed))

    @property
    def constrained(self) -> bool:
        """Whether a grammar holds the tokens (where llama.cpp may spin: a runner's watchdog names it)."""
        return self._grammar is not None

    def sample(self, ctx: llama_cpp.llama_context_p, index: int) -> int:
        """Sample from the logits of batch position `index` and record the token in the chain."""
        if self._grammar is not None:
            return self._grammar.pick(logits_at(ctx, index, self._n_vocab), None if self._argmax_of else self._chain)
        if self._argmax_of:
            # The first of equal maxima, as llama.cpp's greedy sampler takes.
            return int(logits_at(ctx, index, self._argmax_of).argmax())
        return llama_cpp.llama_sampler_sample(self._chain, ctx, index)

    def accept_forced(self, token: int) -> bool:
        """Accept a token of the answer's forced beginning, if the grammar allows it (False: it does
        not, and nothing was accepted: llama.cpp's grammar would abort on a token it refuses)."""
        if self._grammar is not None and not self._grammar.allows(token):
            return False
        self.accept(token)
        return True

    def accept(self, token: int) -> None:
        """Tell the chain (penalties) and the grammar about a token that entered the sequence by another route."""
        llama_cpp.llama_sampler_accept(self._chain, token)
        if self._grammar is not None:
            self._grammar.accept(token)

    def close(self) -> None:
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self._grammar is not None:
            self._grammar.close()
            self._grammar = None

    def __del__(self) -> None:  # a safety net; sequences close their sampler explicitly
        self.close()
