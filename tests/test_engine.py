"""The engine on the real llama.cpp runtime with the real SmolLM2 file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from kv_cells import seq_pos_max

from localchat.errors import ContextOverflowError, ModelLoadError, RequestError
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.events import Done, PrefillProgress, Stats, TextDelta
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import GGML_TYPE_Q8_0, WorkerConfig

N_CTX = 2048
QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three colors.",
    "Explain what a CPU does in one sentence.",
]


def greedy(max_tokens: int = 32, **extra) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **extra)


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def make_engine(model_path: Path, n_batch: int = 512, step_budget: int = 0, n_ctx: int = N_CTX,
                deterministic: bool = True) -> Engine:
    """Deterministic: prompts chunked or reused differently still use the same attention kernel."""
    config = EngineConfig(worker=WorkerConfig(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=8, n_threads=2,
                                              deterministic=deterministic), step_budget=step_budget)
    return Engine.load(model_path, config)


@pytest.fixture(scope="module")
def engine(model_path: Path):
    with make_engine(model_path) as eng:
        yield eng


def long_document(n_sentences: int = 60) -> str:
    lines = [f"Note {i}: the warehouse in district {i % 7} stores {i * 13 % 101} crates of item {i}."
             for i in range(n_sentences)]
    return "\n".join(lines)


def test_greedy_matches_llama_cpp_python(engine: Engine, model_path: Path):
    from llama_cpp import Llama

    # The same knobs as the engine's deterministic mode: its Q8_0 KV cache (this process runs the
    # deterministic mode's kernels, which the reference then uses too).
    reference = Llama(str(model_path), n_ctx=N_CTX, n_batch=512, n_threads=2, flash_attn=True, verbose=False,
                      type_k=GGML_TYPE_Q8_0, type_v=GGML_TYPE_Q8_0)
    try:
        for question in QUESTIONS:
            tokens = engine.prompt_tokens(Request(messages=chat(question)))
            expected = []
            for token in reference.generate(tokens, temp=0.0, top_k=1, repeat_penalty=1.0, reset=True):
                if reference.token_eos() == token or len(expected) == 32:
                    break
                expected.append(token)
            ours = engine.submit(Request(messages=chat(question), sampling=greedy(32))).result()
            assert ours.token_ids == expected, question
    finally:
        reference.close()


def test_concurrent_requests_match_each_alone(engine: Engine):
    alone = [engine.submit(Request(messages=chat(q), sampling=greedy(40))).result().token_ids for q in QUESTIONS]
    streams = [engine.submit(Request(messages=chat(q), sampling=greedy(40))) for q in QUESTIONS]
    together = [s.result().token_ids for s in streams]
    assert together == alone
    assert all(len(t) > 5 for t in alone)


def test_chunked_prefill_matches_one_shot(model_path: Path):
    prompt = chat(long_document(40) + "\nWhich district holds note 12?")
    with make_engine(model_path, n_batch=512) as one_shot:
        expected = one_shot.submit(Request(messages=prompt, sampling=greedy(24))).result()
        assert expected.stats.prompt_tokens > 600
    with make_engine(model_path, n_batch=64) as chunked:
        stream = chunked.submit(Request(messages=prompt, sampling=greedy(24)))
        progress = []
        text = []
        for event in stream:
            if isinstance(event, PrefillProgress):
                progress.append(event.done)
            elif isinstance(event, TextDelta):
                text.append(event.text)
            elif isinstance(event, Done):
                got = event.token_ids
        assert got == expected.token_ids
        assert "".join(text) == expected.text
        assert len(progress) >= expected.stats.prompt_tokens // 64  # one progress event per chunk
        assert progress == sorted(progress)


def test_long_prefill_beside_a_streaming_chat_keeps_both_exact(engine: Engine, model_path: Path):
    document = chat(long_document(50) + "\nSummarize note 3.")
    doc_alone = engine.submit(Request(messages=document, sampling=greedy(16))).result().token_ids
    chat_alone = engine.submit(Request(messages=chat(QUESTIONS[1]), sampling=greedy(48))).result().token_ids
    with make_engine(model_path, step_budget=16) as small_budget:
        streaming = small_budget.submit(Request(messages=chat(QUESTIONS[1]), sampling=greedy(48)))
        first = next(e for e in streaming if isinstance(e, TextDelta))
        assert first.text
        small_budget.step_log = []
        doc = small_budget.submit(Request(messages=document, sampling=greedy(16)))
        rest = streaming.result()
        assert doc.result().token_ids == doc_alone
        mixed = [tokens for _, _, tokens, decodes in small_budget.step_log if decodes and tokens > decodes]
        assert mixed and max(mixed) <= 16 + 8  # the prefill was chunked beside the decoding chat
    assert rest.token_ids == chat_alone  # the chat that streamed beside the prefill is unchanged


def test_follow_up_turn_reuses_the_prefix_and_matches_a_fresh_run(engine: Engine, model_path: Path):
    history = chat(long_document(30) + "\nWhat does note 5 say?")
    first = engine.submit(Request(messages=history, sampling=greedy(24))).result()
    history = history + [{"role": "assistant", "content": first.text},
                         {"role": "user", "content": "And note 6?"}]
    follow = engine.submit(Request(messages=history, sampling=greedy(24))).result()
    assert follow.stats.cached_tokens >= first.stats.prompt_tokens
    assert follow.stats.prompt_tokens - follow.stats.cached_tokens < 40  # only the new turn was prefilled
    with make_engine(model_path) as fresh:
        again = fresh.submit(Request(messages=history, sampling=greedy(24))).result()
    assert again.stats.cached_tokens == 0
    assert again.token_ids == follow.token_ids


def test_cancel_mid_prefill_keeps_what_was_read_and_keeps_serving(model_path: Path):
    with make_engine(model_path, n_batch=32) as eng:
        messages = chat(long_document(60))
        stream = eng.submit(Request(messages=messages, sampling=greedy(8)))
        for event in stream:
            if isinstance(event, PrefillProgress) and event.done > 64:
                stream.cancel()
                break
        events = list(stream)
        assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
        assert not any(isinstance(e, TextDelta) for e in events)
        assert eng.scheduler.running == []
        # The part read stays resident as an idle prefix, and llama.cpp holds exactly those cells.
        kept = [s for s in eng.scheduler.kv.slots if s.tokens]
        read = len(kept[0].tokens)
        assert len(kept) == 1 and read > 64
        assert seq_pos_max(eng.worker, kept[0].id) == read - 1
        after = eng.submit(Request(messages=chat(QUESTIONS[0]), sampling=greedy(8))).result()
        assert after.finish_reason in ("stop", "length") and after.text
        again = eng.submit(Request(messages=messages, sampling=greedy(8))).result()
        assert again.stats.cached_tokens >= read  # the part read before the cancel is not read again


def test_an_engine_closed_when_done_finishes_the_answers_in_flight(model_path: Path):
    # A model switch: the old engine closes only once what it was answering has ended.
    eng = make_engine(model_path)
    streams = [eng.submit(Request(messages=chat(q), sampling=greedy(48, ignore_eos=True))) for q in QUESTIONS[:2]]
    first = next(e for e in streams[0] if isinstance(e, TextDelta))  # answering has begun
    closer = eng.close_when_done()
    results = [s.result() for s in streams]
    assert first.text and all(r.finish_reason == "length" and len(r.token_ids) == 48 for r in results)
    closer.join()
    assert eng.worker.ctx is None  # closed, llama.cpp freed


def test_cancel_mid_decode(engine: Engine):
    stream = engine.submit(Request(messages=chat("Count from one to one hundred in words."), sampling=greedy(200)))
    seen = 0
    for event in stream:
        if isinstance(event, TextDelta):
            seen += 1
            if seen == 3:
                stream.cancel()
        if isinstance(event, Done):
            assert event.finish_reason == "cancelled"
            assert len(event.token_ids) < 200
    slot_tokens = [len(s.resident) for s in engine.scheduler.kv.slots if s.owner is None]
    assert engine.scheduler.running == []
    assert sum(slot_tokens) == engine.scheduler.kv.used_cells()
    assert engine.submit(Request(messages=chat(QUESTIONS[2]), sampling=greedy(8))).result().text


def test_cancel_from_another_thread_while_others_stream(engine: Engine):
    keep = engine.submit(Request(messages=chat(QUESTIONS[3]), sampling=greedy(30)))
    victim = engine.submit(Request(messages=chat(QUESTIONS[1]), sampling=greedy(300)))
    threading.Timer(0.05, victim.cancel).start()
    assert victim.result().finish_reason == "cancelled"
    assert keep.result().finish_reason in ("stop", "length")


def test_same_seed_same_text(engine: Engine):
    def sample(seed: int) -> str:
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, max_tokens=24)
        return engine.submit(Request(messages=chat("Tell me a story."), sampling=params)).result().text

    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3)}) > 1


def test_stop_strings_and_max_tokens(engine: Engine):
    full = engine.submit(Request(messages=chat(QUESTIONS[2]), sampling=greedy(40))).result()
    assert full.text
    word = full.text.split()[min(2, len(full.text.split()) - 1)]
    stopped = engine.submit(Request(messages=chat(QUESTIONS[2]), sampling=greedy(40, stop=[word]))).result()
    assert stopped.finish_reason == "stop"
    assert stopped.text == full.text[: full.text.index(word)]
    short = engine.submit(Request(messages=chat(QUESTIONS[2]), sampling=greedy(3))).result()
    assert short.finish_reason == "length" and len(short.token_ids) == 3


def test_text_is_utf8_correct_across_tokens(engine: Engine):
    result = engine.submit(Request(
        messages=chat("Repeat exactly: 日本語のテキスト 🙂 café"), sampling=greedy(30))).result()
    assert "\ufffd" not in result.text
    pieces = b"".join(engine.worker.token_bytes(t) for t in result.token_ids)
    assert pieces.decode("utf-8", errors="replace").startswith(result.text)


def test_stats_are_reported(engine: Engine):
    events = list(engine.submit(Request(messages=chat(QUESTIONS[0]), sampling=greedy(16))))
    stats = next(e for e in events if isinstance(e, Stats))
    assert stats.prompt_tokens > 10 and 0 < stats.completion_tokens <= 16
    assert stats.ttft_ms > 0 and stats.tokens_per_s > 0
    assert isinstance(events[-1], Done)


# -- bad input ---------------------------------------------------------------------------------


def test_missing_model_path():
    with pytest.raises(ModelLoadError, match="no model file"):
        Engine.load("/nonexistent/model.gguf")


def test_not_a_gguf_file(tmp_path: Path):
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("these are not weights")
    with pytest.raises(ModelLoadError, match="not a GGUF model file"):
        Engine.load(bogus)


def test_truncated_gguf(tmp_path: Path, model_path: Path):
    cut = tmp_path / "cut.gguf"
    with model_path.open("rb") as src:
        cut.write_bytes(src.read(5_000_000))
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        Engine.load(cut)


def test_prompt_beyond_context(model_path: Path):
    with make_engine(model_path, n_ctx=256) as eng:
        with pytest.raises(ContextOverflowError, match="Shorten the prompt"):
            eng.submit(Request(messages=chat(long_document(40))))
        with pytest.raises(ContextOverflowError, match="lower max_tokens"):
            eng.submit(Request(messages=chat("hi"), sampling=greedy(max_tokens=1000)))
        assert eng.submit(Request(messages=chat("hi"), sampling=greedy(4))).result().token_ids


@pytest.mark.parametrize("bad", [
    {"temperature": -1.0}, {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": 1.0}, {"top_k": -3},
    {"max_tokens": 0}, {"repeat_penalty": 0.0}, {"seed": -5}, {"stop": [""]},
])
def test_invalid_sampling_values(engine: Engine, bad: dict):
    with pytest.raises(RequestError, match="invalid|stop strings"):
        engine.submit(Request(messages=chat("hi"), sampling=SamplingParams(**bad)))


def test_bad_messages(engine: Engine):
    with pytest.raises(RequestError, match="role"):
        engine.submit(Request(messages=[{"role": "wizard", "content": "hi"}]))
    with pytest.raises(RequestError, match="messages or a non-empty prompt"):
        engine.submit(Request())


def test_repeat_frequency_and_presence_penalties_steer_greedy_decoding(engine: Engine):
    """A pattern the model would continue, greedily; the repeat and frequency penalties turn it
    elsewhere, repeatably (a presence penalty lowers every token of the pattern alike: it must run)."""
    def answer(**penalty) -> str:
        sampling = SamplingParams(temperature=0.0, max_tokens=16, **penalty)
        return engine.submit(Request(prompt="1, 2, 1, 2, 1, 2, 1, 2, 1, 2,", sampling=sampling)).result().text

    plain = answer()
    assert plain.startswith(" 1, 2, 1, 2")
    for penalty in ({"repeat_penalty": 1.5}, {"frequency_penalty": 1.5}):
        steered = answer(**penalty)
        assert steered != plain, penalty
        assert answer(**penalty) == steered, penalty
    assert answer(presence_penalty=2.0)
