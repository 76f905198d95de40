"""What OpenAI's clients ask of the sampler beyond the usual knobs, on the real engine through the official
`openai` client: `logit_bias` (a banned token never comes, a forced one always does, bad ids are a 400) in chat
and text completions, and `n` choices, whole and streamed."""

from __future__ import annotations

from typing import Iterator

import openai
import pytest
from ui_server import serve_in_thread, stop_servers

from localchat.api.app import create_app
from localchat.api.local import LocalService
from localchat.runtime.engine import Engine

MODEL = "smollm2-135m"
QUESTION = [{"role": "user", "content": "Name the capital city of France."}]


@pytest.fixture(scope="module")
def client(engine: Engine) -> Iterator[openai.OpenAI]:
    running = [serve_in_thread(create_app(LocalService(engine, MODEL)))]
    yield openai.OpenAI(base_url=running[0][0] + "/v1", api_key="unused", max_retries=0, timeout=300)
    stop_servers(running)


@pytest.fixture(scope="module")
def token_ids(engine: Engine) -> dict[bytes, int]:
    """Each token's bytes -> its id (the first id, where two share their bytes), to read logprobs' tokens as ids."""
    worker = engine.worker
    ids: dict[bytes, int] = {}
    for token in range(worker.n_vocab):
        ids.setdefault(worker.token_bytes(token), token)
    return ids


def answer_ids(reply, token_ids: dict[bytes, int]) -> list[int]:
    return [token_ids[bytes(t.bytes)] for t in reply.choices[0].logprobs.content]


def test_logit_bias_bans_and_forces_tokens_in_chat(client: openai.OpenAI, token_ids: dict[bytes, int]):
    plain = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=12,
                                           logprobs=True)
    first = answer_ids(plain, token_ids)
    assert len(first) >= 3, plain
    banned = set(first[:3])
    biased = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=12,
                                            logprobs=True, logit_bias={str(t): -100 for t in banned})
    got = answer_ids(biased, token_ids)
    assert got and not banned & set(got), (plain.choices[0].message.content, biased.choices[0].message.content)
    # Sampled too (the chain, not only the greedy pick, sees the bias).
    for seed in range(3):
        sampled = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=1.5, top_p=1,
                                                 max_tokens=12, seed=seed, logprobs=True,
                                                 logit_bias={str(t): -100 for t in banned})
        assert not banned & set(answer_ids(sampled, token_ids)), sampled.choices[0].message.content
    # +100 all but forces a token; a value past the range is clamped to it, not refused.
    forced = token_ids[b" harbour"]
    pushed = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=4,
                                            logprobs=True, logit_bias={str(forced): 500})
    assert answer_ids(pushed, token_ids) == [forced] * 4, pushed.choices[0].message.content


def test_logit_bias_in_text_completions_streamed_too(client: openai.OpenAI, token_ids: dict[bytes, int]):
    forced = token_ids[b" harbour"]
    whole = client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0, max_tokens=3,
                                      logit_bias={str(forced): 100})
    assert whole.choices[0].text == " harbour" * 3
    streamed = client.completions.create(model=MODEL, prompt="The capital of France is", temperature=0,
                                         max_tokens=3, logit_bias={str(forced): 100}, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == " harbour" * 3


@pytest.mark.parametrize("bias, says", [
    ({"99999999": -100}, "not in this model's vocabulary"),
    ({"-3": -100}, "not a token id"),
    ({"Paris": -100}, "not a token id"),
    ({"12": "a lot"}, "must be a number"),
    ({str(i): -1 for i in range(2000)}, "at most 1024"),
])
def test_a_bad_logit_bias_is_a_400_that_says_why(client: openai.OpenAI, bias: dict, says: str):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, logit_bias=bias)
    assert says in caught.value.message and caught.value.body.get("param") == "logit_bias", caught.value.body


def test_n_choices_whole_and_streamed(client: openai.OpenAI):
    one = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=10)
    greedy = client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, max_tokens=10, n=3)
    assert [c.index for c in greedy.choices] == [0, 1, 2]
    assert {c.message.content for c in greedy.choices} == {one.choices[0].message.content}
    assert greedy.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counted once, as OpenAI counts it
    assert greedy.usage.completion_tokens == 3 * one.usage.completion_tokens
    # Sampled with a seed: each choice its own sequence (seed, seed + 1, ...), so they differ, and each is
    # the answer that seed gives alone.
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "Write a short poem about the sea."}],
               temperature=1.2, top_p=1, max_tokens=16, seed=7)
    sampled = client.chat.completions.create(**ask, n=4)
    texts = [c.message.content for c in sampled.choices]
    assert len(set(texts)) > 1, texts
    assert texts[1] == client.chat.completions.create(**{**ask, "seed": 8}).choices[0].message.content
    assert sampled.usage.completion_tokens == sum(
        client.chat.completions.create(**{**ask, "seed": 7 + i}).usage.completion_tokens for i in range(4))
    streamed: dict[int, str] = {}
    finished = {}
    usage = None
    for chunk in client.chat.completions.create(**ask, n=4, stream=True, stream_options={"include_usage": True}):
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                finished[choice.index] = choice.finish_reason
        usage = chunk.usage or usage
    assert [streamed[i] for i in range(4)] == texts and sorted(finished) == [0, 1, 2, 3]
    assert usage.completion_tokens == sampled.usage.completion_tokens


def test_n_choices_in_text_completions(client: openai.OpenAI):
    whole = client.completions.create(model=MODEL, prompt="The sea is", temperature=1.2, top_p=1, max_tokens=8,
                                      seed=3, n=2)
    assert [c.index for c in whole.choices] == [0, 1] and whole.choices[0].text != whole.choices[1].text
    streamed = {0: "", 1: ""}
    for chunk in client.completions.create(model=MODEL, prompt="The sea is", temperature=1.2, top_p=1,
                                           max_tokens=8, seed=3, n=2, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert [streamed[0], streamed[1]] == [c.text for c in whole.choices]


@pytest.mark.parametrize("n", [0, 9, -1])
def test_n_out_of_bounds_is_a_400(client: openai.OpenAI, n: int):
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=4, n=n)
    assert caught.value.param == "n" and "1 to 8" in caught.value.message
