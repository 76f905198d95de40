"""Speculative decoding on the real runtime: exact under greedy, faithful under sampling."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from localchat.errors import DraftIncompatibleError
from localchat.models.derive import random_weights_like, requantize
from localchat.runtime.engine import Engine, EngineConfig, Request
from localchat.runtime.sampling import SamplingParams
from localchat.runtime.sequence import Sequence
from localchat.runtime.speculation.acceptance import expected_tokens, expected_tokens_by_position
from localchat.runtime.speculation.prompt_lookup import NgramIndex, PromptLookup
from localchat.runtime.speculation.speculative import Drafter, SpecConfig, SpecState, Speculator
from localchat.runtime.step_costs import StepCosts
from localchat.runtime.workers.worker import WorkerConfig

QUOTE = ("The harbour master wrote: 'The northern pier closes at dusk on Fridays, and boats "
         "must anchor east of the red buoy until the tide turns.'")
PROMPTS = [
    f"{QUOTE}\nRepeat exactly what the harbour master wrote.",
    "Write a short poem about autumn leaves.",
    f"{QUOTE}\nWhen does the northern pier close?",
    "List the days of the week.",
]


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def engine_with(model: Path, draft: Path | None = None, lookup: bool = False, fixed_k: int = 0) -> Engine:
    worker = WorkerConfig(n_ctx=2048, n_threads=2, deterministic=True)
    return Engine.load(model, EngineConfig(worker=worker, draft_path=draft, lookup=lookup,
                                           spec=SpecConfig(fixed_k=fixed_k)))


def greedy_outputs(engine: Engine, together: bool) -> list[list[int]]:
    params = lambda: SamplingParams(temperature=0.0, max_tokens=48)  # noqa: E731
    if together:
        streams = [engine.submit(Request(messages=chat(p), sampling=params())) for p in PROMPTS]
        return [s.result().token_ids for s in streams]
    return [engine.submit(Request(messages=chat(p), sampling=params())).result().token_ids for p in PROMPTS]


@pytest.fixture(scope="module")
def plain_outputs(model_path: Path) -> list[list[int]]:
    with engine_with(model_path) as engine:
        return greedy_outputs(engine, together=False)


@pytest.fixture(scope="module")
def random_draft(model_path: Path, tmp_path_factory) -> Path:
    return random_weights_like(model_path, tmp_path_factory.mktemp("drafts") / "random.gguf")


@pytest.mark.parametrize("drafter", ["same-file", "q8-sibling", "random-weights", "lookup"])
def test_greedy_output_is_identical_with_speculation(drafter, model_path, plain_outputs, random_draft):
    draft = {"same-file": model_path, "q8-sibling": requantize(model_path, "Q8_0"),
             "random-weights": random_draft}.get(drafter)
    with engine_with(model_path, draft=draft, lookup=drafter == "lookup", fixed_k=4) as engine:
        assert greedy_outputs(engine, together=False) == plain_outputs
        assert greedy_outputs(engine, together=True) == plain_outputs
        stream = engine.submit(Request(messages=chat(PROMPTS[0]), sampling=SamplingParams(temperature=0.0, max_tokens=48)))
        spec = stream.result().stats.spec
    assert spec is not None and spec.drafted > 0
    if drafter == "same-file":
        assert spec.acceptance > 0.9 and spec.tokens_per_pass > 3
    elif drafter == "q8-sibling":
        assert spec.acceptance > 0.6
    elif drafter == "random-weights":
        assert spec.acceptance < 0.2
    else:
        assert spec.acceptance > 0.5  # the answer quotes the prompt


@pytest.mark.parametrize("change", ["rename", "shrink"])
def test_an_incompatible_vocabulary_is_refused(change, model_path, tmp_path):
    bad = random_weights_like(model_path, tmp_path / f"{change}.gguf", vocab_change=change)
    with pytest.raises(DraftIncompatibleError, match="token 1000|vocabulary sizes differ"):
        engine_with(model_path, draft=bad)


def test_sampling_is_unchanged_by_speculation(model_path):
    """Per seed the same text comes out, so the distributions over many seeds match too."""
    def first_tokens(engine: Engine, seed: int) -> tuple[int, ...]:
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed, max_tokens=6)
        return tuple(engine.submit(Request(messages=chat(PROMPTS[0]), sampling=params)).result().token_ids)

    seeds = range(40)
    with engine_with(model_path) as plain:
        without = [first_tokens(plain, s) for s in seeds]
    with engine_with(model_path, lookup=True, fixed_k=3) as spec:
        with_spec = [first_tokens(spec, s) for s in seeds]
    for position in range(1, 4):
        a = Counter(t[position] for t in without if len(t) > position)
        b = Counter(t[position] for t in with_spec if len(t) > position)
        total_variation = sum(abs(a[k] - b[k]) for k in a.keys() | b.keys()) / (2 * len(seeds))
        assert total_variation <= 0.2, (position, a, b)
    assert len(set(without)) > 5  # sampling really varied
    assert with_spec == without


class FixedCostDrafter:
    """Stands in for a drafter's cost only; the choice of k is pure arithmetic on measured costs."""

    name = "fixed-cost"
    catch_up_seconds = 0.0

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def seconds_per_token(self) -> float:
        return self.seconds

    def calibrate(self) -> None:
        pass

    def propose(self, wanted):
        return {}

    def forget(self, seq) -> None:
        pass

    def close(self) -> None:
        pass


def measured_costs() -> StepCosts:
    costs = StepCosts()
    for width, ms in ((1, 11.0), (2, 13.7), (3, 16.9), (5, 23.0), (9, 35.0)):  # this CPU, Q4_1
        costs.record(width, ms / 1000)
    return costs


def decoding_seq() -> Sequence:
    seq = Sequence(id="s", tokens=list(range(40)), max_tokens=100, num_prompt=30)
    return seq


def test_step_costs_learn_what_the_cached_tokens_add():
    costs = measured_costs()
    costs.record(1, 0.015, kv=1000)  # a plain step 1000 tokens into a chat: 4 ms over the width's part
    assert abs(costs.per_kv - 4e-6) < 1e-12
    assert abs(costs.cost(9, 9 * 1000) - (0.035 + 0.036)) < 1e-12  # nine rows each read the 1000 tokens
    assert costs.table()[1] == 0.011  # a long single-token step leaves the width's part alone
    costs.record(9, 0.080, kv=9 * 1000)  # a wider one refines its width's part, the KV's share taken out
    assert abs(costs.table()[9] - (0.8 * 0.035 + 0.2 * 0.044)) < 1e-12
    spec = Speculator(FixedCostDrafter(0.0), costs)
    # At 50% acceptance one draft pays at the start of a chat, not 1000 tokens into it.
    assert spec.best([0.5] * 8, 1, 8)[1] > 1.05 > spec.best([0.5] * 8, 1, 8, kv=1000, row_kv=1000)[1]


def test_a_free_drafter_measured_slower_than_its_costs_promise_is_probed_rarely():
    spec = Speculator(FixedCostDrafter(0.0), measured_costs(), SpecConfig(probe_every=4))
    seq = decoding_seq()
    state = spec.state(seq)
    state.accepted_weight = 0.9 * state.trials_weight  # the cost model says drafting pays ...
    for _ in range(3):
        state.record_pace(True, 0.030, 1)  # ... but its steps were measured slower than plain ones
    state.record_pace(False, 0.011, 1)
    assert state.measured_slower
    probes = [i for i in range(40) if spec.choose(seq, 1, 64)]
    assert probes == [3, 11, 27]  # after 4, 8 and 16 plain steps: only drafting shows the pace has changed


def test_a_draft_as_slow_as_the_target_is_never_tried():
    spec = Speculator(FixedCostDrafter(0.011), measured_costs(), SpecConfig(probe_every=4))
    seq = decoding_seq()
    spec.state(seq).accepted_weight = spec.state(seq).trials_weight  # even at 100% acceptance
    assert [spec.choose(seq, 1, 64) for _ in range(50)] == [0] * 50


def test_a_free_drafter_speculates_and_backs_off_when_it_misses():
    spec = Speculator(FixedCostDrafter(0.0), measured_costs(), SpecConfig(probe_every=4))
    seq = decoding_seq()
    assert spec.choose(seq, 1, 64) == 1  # at the 50% prior only one draft token pays on these costs
    for _ in range(12):
        spec.observe(seq, 4, 0)
    assert [spec.choose(seq, 1, 64) for _ in range(40)] == [0] * 40  # no probe steps: they cost
    # Its free guesses beside plain steps bring it back once they keep hitting.
    hits = 0
    while not spec.choose(seq, 1, 64):
        spec.state(seq).shadow = 7
        spec.settle_plain(seq, 7)
        hits += 1
    assert 3 <= hits <= 30


def test_a_costly_drafter_that_misses_is_probed_ever_more_rarely():
    spec = Speculator(FixedCostDrafter(0.0005), measured_costs(), SpecConfig(probe_every=4))
    seq = decoding_seq()
    for _ in range(12):
        spec.observe(seq, 4, 0)
    spec.state(seq).accepted_weight = 0.35 * spec.state(seq).trials_weight  # it might yet recover
    choices = [spec.choose(seq, 1, 64) for _ in range(60)]
    probes = [i for i, k in enumerate(choices) if k]
    assert len(probes) >= 2 and all(choices[i] <= 2 for i in probes)  # short probes only
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert gaps == sorted(gaps) and gaps[-1] > gaps[0]  # each failed probe waits longer


def test_seeded_step_costs_replace_the_start_up_timing(model_path):
    seed = {1: 11.0, 2: 13.7, 4: 19.0, 9: 35.0}  # ms by width, as the wizard saves them
    worker = WorkerConfig(n_ctx=2048, n_threads=2, deterministic=True)
    with Engine.load(model_path, EngineConfig(worker=worker, lookup=True, step_costs=seed)) as engine:
        # One prompt step (no decode step: those would refine the table) after the start-up work.
        engine.submit(Request(prompt="Hello", sampling=SamplingParams(temperature=0.0, max_tokens=1))).result()
        assert engine.speculator.costs.table() == {w: ms / 1000 for w, ms in seed.items()}
    with engine_with(model_path, lookup=True) as unseeded:
        unseeded.submit(Request(prompt="Hello", sampling=SamplingParams(temperature=0.0, max_tokens=1))).result()
        assert sorted(unseeded.speculator.costs.table()) == [1, 2, 3, 5, 9]  # timed at start


def test_every_drafter_implements_the_whole_protocol(model_path):
    from localchat.runtime.speculation.draft_model import DraftModel
    from localchat.runtime.workers.worker import Worker

    members = [name for name in dir(Drafter) if not name.startswith("_")] + list(Drafter.__annotations__)
    target = Worker(model_path, WorkerConfig(n_ctx=256, n_threads=1))
    drafters = [PromptLookup(), DraftModel(Worker(model_path, WorkerConfig(n_ctx=256, n_threads=1)), target)]
    try:
        for drafter in drafters + [FixedCostDrafter(0.0)]:
            assert [m for m in members if not hasattr(drafter, m)] == [], type(drafter).__name__
    finally:
        for drafter in drafters:
            drafter.close()
        target.close()


def test_adaptive_engine_keeps_output_and_reports_its_choice(model_path):
    with engine_with(model_path, lookup=True) as engine:
        result = engine.submit(Request(messages=chat(PROMPTS[0]), sampling=SamplingParams(temperature=0.0, max_tokens=48))).result()
    with engine_with(model_path) as plain:
        expected = plain.submit(Request(messages=chat(PROMPTS[0]), sampling=SamplingParams(temperature=0.0, max_tokens=48))).result()
    assert result.token_ids == expected.token_ids
    spec = result.stats.spec
    assert spec.drafter == "prompt-lookup" and spec.accepted <= spec.drafted
    assert spec.predicted_speedup is None if spec.drafted == 0 else spec.predicted_speedup >= 1.0


def test_the_engine_tells_the_speculator_of_every_plain_step(model_path, monkeypatch):
    """Plain steps score the free drafter's guess (how it resumes after misses) and count in the
    request's predicted speedup: both were lost when the step asked whether the sequence was
    decoding after marking its token computed."""
    ended = []
    forget = Speculator.forget
    monkeypatch.setattr(Speculator, "forget", lambda self, seq: ended.append(forget(self, seq)) or ended[-1])
    worker = WorkerConfig(n_ctx=2048, n_threads=2, deterministic=True)
    never = SpecConfig(min_gain=1e9)  # every step plain: the drafter only guesses beside them
    with Engine.load(model_path, EngineConfig(worker=worker, lookup=True, spec=never)) as engine:
        result = engine.submit(Request(messages=chat(PROMPTS[0]), sampling=SamplingParams(
            temperature=0.0, max_tokens=48, ignore_eos=True))).result()
    state = ended[-1]
    assert result.stats.spec.drafted == 0
    assert state.predicted_tokens == state.predicted_cost == len(result.token_ids) - 1  # all but the prompt's
    assert state.trials_weight != SpecState().trials_weight  # the repeated quote's guesses were scored


def test_no_predicted_speedup_is_claimed_when_nothing_was_drafted():
    spec = Speculator(PromptLookup(), measured_costs())
    seq = decoding_seq()  # distinct tokens: prompt lookup finds no n-gram to continue
    assert spec.draft([(seq, 1)], room=64) == {}
    state = spec.state(seq)
    assert state.predicted_gain > 1.05  # the cost model did promise a speedup ...
    assert spec.forget(seq).stats("prompt-lookup").predicted_speedup is None  # ... that was never earned
    drafting = decoding_seq()
    spec.draft([(drafting, 1)], room=64)
    spec.observe(drafting, 2, 1)
    assert spec.forget(drafting).stats("prompt-lookup").predicted_speedup > 1.0


def test_expected_tokens_and_cost_interpolation():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert abs(expected_tokens(0.5, 2) - 1.75) < 1e-9
    costs = StepCosts()
    costs.record(1, 0.010)
    costs.record(3, 0.016)
    assert abs(costs.cost(2) - 0.013) < 1e-9
    assert abs(costs.cost(5) - 0.022) < 1e-9


def test_acceptance_is_measured_by_draft_position():
    assert abs(expected_tokens_by_position([0.7] * 5, 5) - expected_tokens(0.7, 5)) < 1e-12
    assert expected_tokens_by_position([1.0, 0.5], 2) == 2.5
    # Copied passages: drafts are taken whole or missed at their first token, half the steps each.
    copying = SpecState()
    for _ in range(10):
        copying.observe(8, 8)
        copying.observe(8, 0)
    rates = copying.rates(8)
    assert rates[0] < 0.6 and min(rates[1:]) > 0.9  # once the first draft is right, the rest follow
    # One rate for all positions (~89% here) would promise more than the ~5 tokens these steps gave.
    assert 4.5 < copying.expected_tokens(8) < 5.5 < expected_tokens(copying.acceptance, 8)
    for guess in range(20):  # plain steps score a free drafter's guess: position 0 alone
        copying.observe(1, guess % 2)
    assert min(copying.rates(8)[1:]) > 0.9  # how a passage goes on, once taken, is still known
    # Long runs all accepted: the next long draft is expected to be taken whole, almost.
    whole = SpecState()
    for _ in range(3):
        whole.observe(8, 8)
    assert whole.expected_tokens(8) > 8.3 > expected_tokens(whole.acceptance, 8)


def test_ngram_lookup_proposes_what_followed():
    index = NgramIndex(max_n=3)
    tokens = [1, 2, 3, 4, 5, 9, 9, 2, 3]
    assert index.propose(tokens, 3) == [4, 5, 9]
    tokens += [4, 7]
    assert index.propose(tokens, 2) == []  # neither (4, 7) nor (3, 4, 7) occurred before
    tokens += [2, 3, 4]
    assert index.propose(tokens, 3) == [7, 2, 3]  # the latest occurrence of (2, 3, 4) wins
    assert NgramIndex().propose([1, 2, 3], 4) == []
