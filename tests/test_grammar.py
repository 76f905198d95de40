"""Constrained sampling and logprobs on the real runtime: exact with speculation, batching, prefix
reuse and the PD split; schema-valid output; the target's own log-probabilities."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import jsonschema
import llama_cpp
import pytest

from localchat.errors import RequestError
from localchat.runtime.constraints.grammar import Grammar, new_grammar_sampler
from localchat.runtime.constraints.resample import MAX_RESAMPLES, SchemaUnmetError
from localchat.runtime.constraints.schema_grammar import grammar_from_json_schema
from localchat.runtime.constraints.schema_rules import FORMATS
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.events import Stats, TextDelta
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.speculation.speculative import SpecConfig
from localchat.runtime.workers.worker import WorkerConfig

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 24},
        "population": {"type": "integer"},
        "coastal": {"type": "boolean"},
        "landmarks": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3},
        "continent": {"enum": ["Europe", "Asia", "Africa", "America", "Oceania"]},
    },
    "required": ["city", "population", "landmarks", "continent"],
}
PROMPTS = [
    "Describe Paris as JSON.",
    "Give the facts about Tokyo as a JSON object.",
    "Repeat: {\"city\": \"Lima\", \"population\": 10000000, \"landmarks\": [\"Plaza\"]} and then describe Lima.",
]


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def engine_with(model: Path, draft: Path | None = None, lookup: bool = False, pd: bool = False) -> Engine:
    worker = WorkerConfig(n_ctx=2048, n_threads=2, deterministic=True)
    return Engine.load(model, EngineConfig(worker=worker, draft_path=draft, lookup=lookup,
                                           spec=SpecConfig(fixed_k=4), prefill=worker if pd else None,
                                           handover_min_tokens=16))


def constrained(max_tokens: int = 64, **extra) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, grammar=grammar_from_json_schema(SCHEMA), **extra)


def outputs(engine: Engine) -> tuple[list[list[int]], list[list[int]], list[str]]:
    """Greedy token ids of every prompt alone (the first one twice: from its resident prefix the
    second time), then all at once; and the texts."""
    alone = [engine.submit(Request(messages=chat(p), sampling=constrained())).result() for p in PROMPTS]
    again = engine.submit(Request(messages=chat(PROMPTS[0]), sampling=constrained())).result()
    assert again.token_ids == alone[0].token_ids and again.stats.cached_tokens > 0
    streams = [engine.submit(Request(messages=chat(p), sampling=constrained())) for p in PROMPTS]
    return [r.token_ids for r in alone], [s.result().token_ids for s in streams], [r.text for r in alone]


@pytest.fixture(scope="module")
def plain(model_path: Path) -> list[list[int]]:
    with engine_with(model_path) as engine:
        alone, together, texts = outputs(engine)
    assert together == alone
    for text in texts:
        jsonschema.validate(json.loads(text), SCHEMA)
    return alone


@pytest.mark.parametrize("mode", ["draft-model", "prompt-lookup", "pd-split"])
def test_greedy_output_under_a_grammar_is_identical(mode, model_path, plain):
    with engine_with(model_path, draft=model_path if mode == "draft-model" else None,
                     lookup=mode == "prompt-lookup", pd=mode == "pd-split") as engine:
        alone, together, _ = outputs(engine)
        spec = engine.submit(Request(messages=chat(PROMPTS[2]), sampling=constrained())).result().stats.spec
    assert alone == plain and together == plain
    if mode != "pd-split":
        # Drafts were made without the grammar and verified under it: some were kept, some refused.
        assert spec is not None and 0 < spec.accepted < spec.drafted


def test_sampled_output_validates(engine_plain):
    grammar = grammar_from_json_schema(SCHEMA)
    for seed in range(5):
        params = SamplingParams(temperature=0.8, seed=seed, max_tokens=200, grammar=grammar)
        result = engine_plain.submit(Request(messages=chat(PROMPTS[seed % 3]), sampling=params)).result()
        assert result.finish_reason == "stop", result.text
        jsonschema.validate(json.loads(result.text), SCHEMA)


@pytest.fixture(scope="module")
def engine_plain(model_path: Path):
    with engine_with(model_path, lookup=True) as engine:
        yield engine


def test_a_lazy_grammar_constrains_from_its_trigger_on(engine_plain):
    prompt = chat("Tell me about the sea.")
    free = engine_plain.submit(Request(messages=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=24))).result()
    words = free.text.split()
    trigger = next(w for w in words[2:] if w.isalpha() and len(w) > 3)  # a word the answer reaches freely
    grammar = Grammar(f'root ::= "{trigger}" " is constrained."', (trigger,))
    lazy = engine_plain.submit(Request(messages=prompt, sampling=SamplingParams(temperature=0.0, max_tokens=40,
                                                                               grammar=grammar))).result()
    head = free.text[: free.text.index(trigger)]
    assert lazy.text == f"{head}{trigger} is constrained." and lazy.finish_reason == "stop"


def test_a_grammar_llama_cpp_cannot_parse_is_refused_at_submit(engine_plain):
    for bad in ["root ::= undefined-rule", "root ::= \"unclosed", "not a grammar at all"]:
        with pytest.raises(RequestError, match="grammar"):
            engine_plain.submit(Request(messages=chat("Hi"), sampling=SamplingParams(grammar=Grammar(bad))))
    result = engine_plain.submit(Request(messages=chat("Hi"), sampling=SamplingParams(temperature=0.0, max_tokens=4))).result()
    assert result.token_ids  # the engine kept serving


def test_logprobs_are_the_targets_and_agree_with_speculation(model_path):
    question = "Repeat exactly: the red fox jumps over the red fence."
    runs = []
    for draft in (None, model_path):
        with engine_with(model_path, draft=draft) as engine:
            stream = engine.submit(Request(messages=chat(question),
                                           sampling=SamplingParams(temperature=0.0, max_tokens=32, logprobs=5)))
            events = list(stream)
        entries = [lp for event in events if isinstance(event, TextDelta) for lp in event.logprobs]
        token_ids = events[-1].token_ids
        assert len(entries) == len(token_ids) and len(entries) > 5
        for entry in entries:
            assert entry.logprob <= 0.0 and len(entry.top) == 5
            assert entry.bytes == entry.top[0][1] and math.isclose(entry.logprob, entry.top[0][2])  # greedy = top-1
            assert all(a[2] >= b[2] for a, b in zip(entry.top, entry.top[1:]))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert b"".join(entry.bytes for entry in entries).decode() == text
        runs.append(entries)
    plain, speculative = runs
    assert [e.bytes for e in plain] == [e.bytes for e in speculative]
    assert all(abs(a.logprob - b.logprob) < 1e-3 for a, b in zip(plain, speculative))


BOUNDED = {"type": "object", "properties": {
    "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
    "year": {"type": "integer", "minimum": 1990, "exclusiveMaximum": 2031},
    "offset": {"type": "integer", "minimum": -40, "maximum": -3}}, "required": ["passengers", "year", "offset"]}


def test_integer_bounds_hold_in_the_grammar_itself(engine_plain):
    grammar = grammar_from_json_schema(BOUNDED)
    assert not grammar.check.hold  # nothing is left to the check: digit-range rules enforce the bounds
    for seed in range(6):
        params = SamplingParams(temperature=1.2, seed=seed, max_tokens=64, grammar=grammar)
        result = engine_plain.submit(Request(messages=chat("A ferry booking as JSON."), sampling=params)).result()
        jsonschema.validate(json.loads(result.text), BOUNDED)
        assert not result.stats.resampled
    with pytest.raises(RequestError):
        grammar_from_json_schema({"type": "no-such-type"})


def test_forced_text_begins_the_answer_under_its_grammar(engine_plain):
    whole = engine_plain.submit(Request(messages=chat(PROMPTS[0]), sampling=constrained())).result()
    head = whole.text[:whole.text.index('"population"')]
    rest = engine_plain.submit(Request(messages=chat(PROMPTS[0]), sampling=constrained(), forced=head)).result()
    jsonschema.validate(json.loads(head + rest.text), SCHEMA)  # the stream carries only what follows
    assert not rest.text.startswith(head[:8]) and len(rest.token_ids) > rest.stats.completion_tokens
    with pytest.raises(RequestError, match="does not follow its grammar"):
        engine_plain.submit(Request(messages=chat(PROMPTS[0]), sampling=constrained(), forced='{"town'))


COLOURS = {"type": "object", "properties": {"colours": {
    "type": "array", "items": {"enum": ["red", "green", "blue", "cyan", "black"]}, "minItems": 3, "maxItems": 3,
    "uniqueItems": True}}, "required": ["colours"]}


def test_an_answer_that_fails_the_check_is_resampled_until_it_passes(engine_plain):
    grammar = grammar_from_json_schema(COLOURS)
    assert grammar.check.hold  # uniqueItems: the grammar cannot express it
    prompt = chat("Name three colours as JSON: red, red, blue.")
    free = engine_plain.submit(Request(messages=prompt, sampling=SamplingParams(
        temperature=0.0, max_tokens=48, grammar=Grammar(grammar.gbnf)))).result()  # the grammar alone
    assert not jsonschema.Draft202012Validator(COLOURS).is_valid(json.loads(free.text))
    events = list(engine_plain.submit(Request(messages=prompt, sampling=dataclasses.replace(
        constrained(48), grammar=grammar))))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    jsonschema.validate(json.loads(text), COLOURS)  # what came out is the passing answer alone
    stats = next(e for e in events if isinstance(e, Stats))
    assert stats.resampled and set(stats.resampled) == {"uniqueItems"} and stats.resample_ms > 0


def test_when_the_attempts_run_out_the_keyword_is_named(engine_plain):
    impossible = grammar_from_json_schema({"type": "integer", "minimum": 0, "maximum": 9, "not": {"type": "integer"}})
    stream = engine_plain.submit(Request(messages=chat("Say hi."), sampling=SamplingParams(
        temperature=0.0, max_tokens=8, grammar=impossible)))
    with pytest.raises(SchemaUnmetError, match=re.escape("keyword 'not' at $ (") + ".*" +
                       re.escape(f"in {MAX_RESAMPLES + 1} tries")):
        stream.result()


def test_a_schema_string_refuses_raw_control_characters(engine_plain):
    # JSON allows a newline in a string only escaped; the converter's own string rule lets it in raw.
    grammar = grammar_from_json_schema({"type": "string"})
    prompt = chat("Write a two-line poem, one line per line.")
    params = SamplingParams(temperature=1.5, seed=3, max_tokens=48, grammar=grammar)
    for seed in range(3):
        text = engine_plain.submit(Request(messages=prompt, sampling=dataclasses.replace(params, seed=seed))).result().text
        assert not any(ord(c) < 0x20 for c in text), repr(text)


def test_llama_cpp_takes_the_grammar_of_every_corpus_schema_and_format(engine_plain):
    corpus = json.loads((Path(__file__).parent / "data" / "schema_corpus.json").read_text())
    schemas = [entry["schema"] for entry in corpus] + [{"type": "string", "format": name} for name in FORMATS]
    schemas += [{"type": "string", "pattern": p} for p in ("^\\d{3}-[A-Z]{2}\\.x$", "[ -~]+", "^(?:ab|c)+?$")]
    schemas += [{"type": "integer", "minimum": -12, "exclusiveMaximum": 345}, {"type": "number", "multipleOf": 0.01}]
    for schema in schemas:
        sampler = new_grammar_sampler(grammar_from_json_schema(schema), engine_plain.worker.vocab)
        llama_cpp.llama_sampler_free(sampler)
