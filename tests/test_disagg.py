"""PD split on the CPU: two real llama.cpp workers stand in for two devices."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from kv_cells import seq_pos_max

from localchat.errors import KVHandoverError
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.events import PrefillProgress, TextDelta
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.workers.worker import Worker, WorkerConfig

N_CTX = 4096


def greedy(max_tokens: int = 24, **extra) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **extra)


def document(n_lines: int, topic: str = "warehouse") -> str:
    return "\n".join(f"Note {i}: the {topic} in district {i % 7} stores {i * 13 % 101} crates of item {i}."
                     for i in range(n_lines))


PROMPTS = [
    [{"role": "user", "content": document(30) + "\nHow many crates does district 3 store for item 10?"}],
    [{"role": "user", "content": "Name the capital city of France."}],
    [{"role": "user", "content": document(45, "depot") + "\nWhich item is stored in district 5?"}],
    [{"role": "user", "content": "List three colors."}],
]


def config(pd: bool, n_ctx: int = N_CTX, n_batch: int = 512, **extra) -> EngineConfig:
    # Deterministic: the same attention kernel however a prompt is chunked, so any difference is a bug.
    worker = WorkerConfig(n_ctx=n_ctx, n_batch=n_batch, n_seq_max=8, n_threads=1 if pd else 2, deterministic=True)
    return EngineConfig(worker=worker, prefill=worker if pd else None, **extra)


def run_all(engine: Engine) -> list:
    streams = [engine.submit(Request(messages=m, sampling=greedy())) for m in PROMPTS]
    return [s.result() for s in streams]


@pytest.fixture(scope="module")
def single_outputs(model_path: Path) -> list[list[int]]:
    with Engine.load(model_path, config(pd=False)) as engine:
        return [r.token_ids for r in run_all(engine)]


@pytest.mark.parametrize("speculation", ["none", "lookup", "draft"])
def test_greedy_output_is_identical_to_one_worker(speculation, model_path, single_outputs):
    extra = {"lookup": True} if speculation == "lookup" else {"draft_path": model_path} if speculation == "draft" else {}
    with Engine.load(model_path, config(pd=True, **extra)) as engine:
        results = run_all(engine)
    assert [r.token_ids for r in results] == single_outputs
    handed = [r.stats.kv_transfer_bytes > 0 for r in results]
    assert handed == [True, False, True, False]  # documents went through the prefill worker, chats did not
    assert all(r.stats.kv_transfer_ms > 0 for r, h in zip(results, handed) if h)


def test_a_follow_up_reuses_the_handed_over_prefix(model_path, single_outputs):
    with Engine.load(model_path, config(pd=True)) as engine:
        first = engine.submit(Request(messages=PROMPTS[0], sampling=greedy())).result()
        follow = PROMPTS[0] + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "And item 11?"}]
        second = engine.submit(Request(messages=follow, sampling=greedy())).result()
    assert first.token_ids == single_outputs[0]
    assert second.stats.cached_tokens > first.stats.prompt_tokens  # the decode side kept the document
    assert second.stats.kv_transfer_bytes == 0


SHORT = ["Describe Paris as JSON.", "Give the facts about Tokyo as a JSON object.",
         "Repeat: {\"city\": \"Lima\", \"population\": 10000000} and then describe Lima."]


def logprobs_of(stream) -> list[float]:
    return [lp.logprob for event in stream if isinstance(event, TextDelta) for lp in event.logprobs]


@pytest.mark.parametrize("pd", [False, True])
def test_a_sequence_decodes_the_same_wherever_its_cells_lie(pd, model_path):
    # Read one by one, the prompts stay resident; read again side by side, their new KV cells could
    # land below their older ones (in cells freed meanwhile, an import's holes) and the same tokens
    # would sum attention in another order. Every token's log-probability must be equal, bit for bit.
    with Engine.load(model_path, config(pd=pd, handover_min_tokens=16)) as engine:
        request = lambda text: Request(messages=[{"role": "user", "content": text}],  # noqa: E731
                                       sampling=greedy(24, logprobs=0))
        alone = [logprobs_of(engine.submit(request(text))) for text in SHORT]
        streams = [engine.submit(request(text)) for text in SHORT]
        together = [logprobs_of(stream) for stream in streams]
    assert together == alone


def test_a_long_prefill_does_not_hold_up_decode_steps(model_path):
    with Engine.load(model_path, config(pd=True, n_batch=128)) as engine:
        engine.step_log, engine.pd.prefill.step_log = [], []
        chat = engine.submit(Request(messages=PROMPTS[1], sampling=greedy(2000, ignore_eos=True)))
        events = iter(chat)
        while not isinstance(next(events), TextDelta):
            pass
        doc = engine.submit(Request(messages=[{"role": "user", "content": document(60) + "\nSummarise."}],
                                    sampling=greedy(4))).result()
        chat.cancel()
        for _ in events:
            pass
    chunks = engine.pd.prefill.step_log
    assert len(chunks) >= 8, "the document should take several prefill chunks"
    start, end = chunks[0][0], chunks[-1][0] + chunks[-1][1]
    during = [s for s in engine.step_log if start <= s[0] <= end]
    # The chat kept decoding while the document was prefilled: steps overlapped every chunk on average...
    assert len(during) >= len(chunks)
    # ...and no decode-side step carried the document (only the one token handed over, after the end).
    assert all(width == rows for _, _, width, rows in during)
    assert doc.stats.prompt_tokens > 8 * 128 and doc.stats.kv_transfer_bytes > 0


def workers_are_clean(engine: Engine) -> bool:
    prefill = engine.pd.prefill
    deadline = time.monotonic() + 30
    while not (prefill.idle() and engine._inbox.empty()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)  # the engine thread finishes the message it took
    decode_free = all(s.owner is None for s in engine.scheduler.kv.slots) and not engine.scheduler.has_work()
    decode_kv_empty = all(seq_pos_max(engine.worker, s.id) < 0 or s.tokens for s in engine.scheduler.kv.slots)
    prefill_free = all(s.owner is None for s in prefill.kv.slots)
    prefill_kv_empty = all(seq_pos_max(prefill.worker, s.id) < 0 or s.tokens for s in prefill.kv.slots)
    return decode_free and decode_kv_empty and prefill_free and prefill_kv_empty and not engine._by_id


@pytest.mark.parametrize("moment", ["mid-prefill", "before-delivery", "after-delivery"])
def test_cancel_during_hand_over_leaves_both_workers_clean(moment, model_path, single_outputs):
    with Engine.load(model_path, config(pd=True, n_batch=64)) as engine:
        prefill = engine.pd.prefill
        deliver = prefill._deliver
        holder: dict = {}

        def cancelling(request_id, handover, error):
            if moment == "before-delivery":
                holder["stream"].cancel()
            deliver(request_id, handover, error)
            if moment == "after-delivery":
                holder["stream"].cancel()

        prefill._deliver = cancelling
        stream = holder["stream"] = engine.submit(Request(messages=PROMPTS[2], sampling=greedy()))
        if moment == "mid-prefill":
            for event in stream:
                if isinstance(event, PrefillProgress) and event.done > 0:
                    stream.cancel()
                    break
        result = stream.result()
        assert result.finish_reason == "cancelled"
        assert workers_are_clean(engine)
        prefill._deliver = deliver
        again = engine.submit(Request(messages=PROMPTS[2], sampling=greedy())).result()
        assert again.token_ids == single_outputs[2]


def test_workers_of_different_contexts_are_refused(model_path, q8_model_path):
    worker = WorkerConfig(n_ctx=1024, n_threads=1)
    with pytest.raises(KVHandoverError, match="n_ctx 2048"):
        Engine.load(model_path, EngineConfig(worker=worker, prefill=dataclasses.replace(worker, n_ctx=2048)))
    target, other = Worker(model_path, worker), Worker(q8_model_path, worker)
    with pytest.raises(KVHandoverError, match="same model file"):
        Engine(target, prefill_worker=other)
    target.close()
    other.close()


def test_state_with_a_foreign_fingerprint_is_refused_and_serving_goes_on(model_path, single_outputs):
    with Engine.load(model_path, config(pd=True)) as engine:
        deliver = engine.pd.prefill._deliver
        engine.pd.prefill._deliver = lambda rid, handover, error: deliver(
            rid, dataclasses.replace(handover, fingerprint="model 0000, n_ctx 4096, KV f16/f16"), error)
        with pytest.raises(KVHandoverError, match="different context"):
            engine.submit(Request(messages=PROMPTS[0], sampling=greedy())).result()
        engine.pd.prefill._deliver = deliver
        assert engine.submit(Request(messages=PROMPTS[0], sampling=greedy())).result().token_ids == single_outputs[0]
