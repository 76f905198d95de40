"""Speculative decoding: drafters propose tokens, the target checks them inside the batched step.
(Over 300 lines: per-sequence acceptance and the draft-length choice are one policy; the step costs
it prices drafts with live in step_costs.py.)

Verification samples the target at every drafted position with the request's own sampler and keeps
drafts while they equal what the target sampled, so every emitted token is the target's own: the
output is identical to plain decoding under greedy, and drawn from the target under sampling.
How many tokens to draft is chosen per sequence and step from measured costs and acceptance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from ..events import SpecStats
from ..scheduler import Row
from ..sequence import Sequence
from ..step_costs import StepCosts, kv_read
from ..workers.worker import BatchRow, Worker
from .acceptance import expected_tokens_by_position

POSITIONS = 16  # draft positions measured apart (the longest draft is 8 unless configured); later ones read the last one's record


@dataclass(slots=True)
class SpecState:
    """One sequence's speculation record: acceptance with decay, and what it drafted."""

    accepted_weight: float = 1.0  # a mild prior of 50% acceptance
    trials_weight: float = 2.0
    # The same by draft position: reached (every draft before it accepted) and accepted there.
    position_reached: list[float] = field(default_factory=lambda: [0.0] * POSITIONS)
    position_accepted: list[float] = field(default_factory=lambda: [0.0] * POSITIONS)
    drafted: int = 0
    accepted: int = 0
    steps: int = 0  # target passes that carried drafts
    k_total: int = 0
    idle_steps: int = 0  # steps since speculation was last tried, while it looked unprofitable
    probe_interval: int = 0  # grows while probes keep finding speculation unprofitable
    predicted_gain: float = 1.0  # the last step's: what drafting promised when it was chosen
    base_width: int = 1  # the step's width before this sequence's drafts, when they were chosen
    base_kv: int = 0  # and the cached tokens its tokens attend to
    row_kv: int = 0  # the cached tokens each of this sequence's drafts attends to
    # What the cost model expected of the request so far: tokens, and time in plain steps' costs (a
    # plain step counts 1 and 1): their ratio is its prediction of the whole answer's speedup.
    predicted_tokens: float = 0.0
    predicted_cost: float = 0.0
    shadow: int | None = None  # a free drafter's guess for the next token while not speculating
    # Wall seconds per emitted token as this sequence lived them, with and without drafts: the
    # final word on whether speculation pays, whatever the cost model predicts.
    plain_spt: float | None = None
    spec_spt: float | None = None
    spec_samples: int = 0
    since_plain: int = 0  # drafting steps since the last plain one

    def record_pace(self, drafted: bool, seconds: float, tokens: int) -> None:
        """One step took `seconds` of wall time and gave this sequence `tokens` tokens."""
        if tokens <= 0:
            return
        sample = seconds / tokens
        if drafted:
            self.spec_spt = sample if self.spec_spt is None else 0.7 * self.spec_spt + 0.3 * sample
            self.spec_samples += 1
            self.since_plain += 1
        else:
            self.since_plain = 0
            self.plain_spt = sample if self.plain_spt is None else 0.8 * self.plain_spt + 0.2 * sample

    @property
    def measured_slower(self) -> bool:
        """Speculation has been measured, on this sequence, to emit tokens no faster than plain steps."""
        return (self.spec_samples >= 3 and self.plain_spt is not None and self.spec_spt is not None
                and self.spec_spt * 1.02 >= self.plain_spt)

    @property
    def acceptance(self) -> float:
        return self.accepted_weight / self.trials_weight

    def rates(self, k: int) -> list[float]:
        """Acceptance at each of k draft positions, given every draft before it was accepted: what
        each position measured, drawn towards the overall rate by one trial's weight (a position
        rarely reached says little on its own)."""
        overall = self.acceptance
        last = POSITIONS - 1
        return [(self.position_accepted[min(i, last)] + overall) / (self.position_reached[min(i, last)] + 1.0)
                for i in range(k)]

    def expected_tokens(self, k: int) -> float:
        return expected_tokens_by_position(self.rates(k), k)

    def stats(self, drafter: str) -> SpecStats:
        """The request's speculation numbers for its final Stats event."""
        passes = self.steps
        return SpecStats(
            drafter=drafter, drafted=self.drafted, accepted=self.accepted, target_passes=passes,
            mean_k=self.k_total / passes if passes else 0.0,
            tokens_per_pass=(self.accepted + passes) / passes if passes else 1.0,
            # The cost model's figure is a promise; with nothing drafted it was never put to the test.
            predicted_speedup=(None if not self.drafted else self.predicted_tokens / self.predicted_cost
                               if self.predicted_cost else self.predicted_gain),
        )

    def observe(self, k: int, accepted: int) -> None:
        """Update after a step that drafted k tokens of which `accepted` were kept."""
        trials = accepted + (1 if accepted < k else 0)
        self.accepted_weight = 0.9 * self.accepted_weight + accepted
        self.trials_weight = 0.9 * self.trials_weight + trials
        # A position's record ages only when a step reaches it: a plain step's scored guess (position 0)
        # says nothing of how a passage goes on once its first draft is taken.
        for i in range(min(trials, POSITIONS)):
            self.position_reached[i] = 0.9 * self.position_reached[i] + 1.0
            self.position_accepted[i] = 0.9 * self.position_accepted[i] + (1.0 if i < accepted else 0.0)


class Drafter(Protocol):
    """Everything the engine and the speculator call on a drafter (draft_model.DraftModel,
    prompt_lookup.PromptLookup)."""

    name: str
    # Seconds the last propose() spent reading new prompt tokens rather than drafting: a one-off per
    # request, which the speculator keeps out of its per-step overhead.
    catch_up_seconds: float

    def seconds_per_token(self) -> float:
        """The measured cost of one drafting round (0 for a free drafter)."""
        ...

    def calibrate(self) -> None:
        """Measure the drafter's own costs before the first request (runs on the engine thread)."""
        ...

    def propose(self, wanted: list[tuple[Sequence, int]]) -> dict[str, list[int]]:
        """Up to k draft tokens for each (sequence, k), by sequence id."""
        ...

    def forget(self, seq: Sequence) -> None:
        """The sequence ended: drop what was kept for it."""
        ...

    def close(self) -> None:
        """Free what the drafter holds (a draft model's worker)."""
        ...


@dataclass(slots=True)
class SpecConfig:
    """How speculation is run: which drafter, the longest draft, the gain it must promise."""

    max_draft: int = 8
    min_gain: float = 1.05  # predicted speedup below this: plain decoding
    probe_every: int = 16  # steps between tries while speculation looks unprofitable
    fixed_k: int = 0  # draft exactly this many tokens every step, paying or not (tests, benchmarks)


@dataclass(slots=True)
class Speculator:
    """Chooses per-sequence draft lengths from measured costs and acceptance; keeps the stats."""

    drafter: Drafter
    costs: StepCosts
    config: SpecConfig = field(default_factory=SpecConfig)
    states: dict[str, SpecState] = field(default_factory=dict)
    # What a drafting step costs beyond the target's pass and the drafter's rounds: feeding the
    # drafter the last accepted tokens, verifying, removing rejected KV. Measured on live steps.
    fixed_overhead: float = 0.0

    def record_overhead(self, rounds: int, seconds: float) -> None:
        """A step ran `rounds` drafting rounds and spent `seconds` outside the target's decode."""
        if rounds <= 0:
            return
        sample = max(seconds - rounds * self.drafter.seconds_per_token(), 0.0)
        self.fixed_overhead = 0.8 * self.fixed_overhead + 0.2 * sample

    def calibrate(self, worker: Worker) -> None:
        """Learn this machine's costs before the first request: the target's step by width (unless
        seeded from an earlier measurement) and the drafter's own."""
        if not self.costs.known():
            self._time_widths(worker)
        self.drafter.calibrate()

    def _time_widths(self, worker: Worker) -> None:
        """Time target steps of a few widths as verification runs them, with logits at every row (the
        output matrix per row: 262k-token vocabularies make that most of a small model's step); the
        rest is interpolated, then measured live."""
        token = worker.bos_token if worker.bos_token >= 0 else 0
        top = self.config.max_draft + 1
        worker.decode([BatchRow(0, [token] * 4, 0, True)])  # warm up
        for width in sorted({1, 2, 3, (top + 1) // 2, top}):
            times = []
            for _ in range(2):  # the faster of two: a one-off hiccup only ever adds time
                t0 = time.perf_counter()
                worker.decode([BatchRow(0, [token] * width, 4, True, all_logits=True)])
                times.append(time.perf_counter() - t0)
                worker.seq_remove(0, 4, -1)
            self.costs.record(width, min(times), kv_read(4, width))
        worker.seq_remove(0)

    def speculation_cost(self, k: int) -> float:
        """Seconds a step spends on speculation with k drafts, beyond the target's own pass."""
        return self.fixed_overhead + k * self.drafter.seconds_per_token()

    def state(self, seq: Sequence) -> SpecState:
        return self.states.setdefault(seq.id, SpecState())

    def choose(self, seq: Sequence, base_width: int, room: int, kv: int = 0) -> int:
        """The draft length that maximises the sequence's expected tokens per second; 0 when none pays.
        `kv`: the cached tokens the step's tokens attend to before this sequence's drafts.

        Each sequence decides for itself, beside other streams too: weighing the others' tokens (the
        step's throughput) let the first sequences of a step take the drafts and the rest pay for their
        wider steps, 0.7-0.9x of --no-spec for gemma beside two chats where this rule gives 1.0-2.4x."""
        state = self.state(seq)
        state.base_width, state.base_kv, state.row_kv = base_width, kv, len(seq.tokens)
        limit = min(self.config.max_draft, room, seq.max_tokens - seq.num_generated - 1)
        if limit <= 0:
            return 0
        if self.config.fixed_k:
            return min(self.config.fixed_k, limit)
        if not self.costs.known():
            return 0
        best_k, best_gain = self.best(state.rates(limit), base_width, limit, kv, state.row_kv)
        state.predicted_gain = best_gain
        promised = best_gain >= self.config.min_gain
        if promised and not state.measured_slower:
            if state.since_plain >= (32 if state.plain_spt is not None else 3):
                return 0  # a plain step now and then keeps the comparison honest
            state.idle_steps = 0
            state.probe_interval = self.config.probe_every
            return best_k
        if self.drafter.seconds_per_token() == 0.0 and not (state.measured_slower and promised):
            # A free drafter is not probed for its acceptance: its guess for each plain step (the
            # shadow) is scored at no cost, and drafting resumes when those guesses say it pays. On a
            # CPU a verify step of 2 tokens costs ~1.8 of one, so a probe that misses costs most of a
            # step. Measured slower than the costs promise it, it is probed (rarely): only drafting
            # steps can show that the pace has changed.
            return 0
        # Probe only if acceptance could plausibly recover enough to pay. A drafter with a cost of
        # its own must also catch up on every token since it last drafted, so it gets no benefit of
        # the doubt beyond halfway to perfect acceptance.
        hopeful = [(1.0 + rate) / 2 for rate in state.rates(limit)]
        if self.best(hopeful, base_width, limit, kv, state.row_kv)[1] < self.config.min_gain:
            return 0
        state.idle_steps += 1
        state.probe_interval = state.probe_interval or self.config.probe_every
        if state.idle_steps < state.probe_interval:
            return 0
        # Probe: acceptance or costs may have changed. Each unprofitable probe doubles the wait.
        state.idle_steps = 0
        state.probe_interval = min(state.probe_interval * 2, 32 * self.config.probe_every)
        return best_k or min(2, limit)

    def best(self, rates: list[float], base_width: int, limit: int, kv: int = 0, row_kv: int = 0) -> tuple[int, float]:
        """(k, predicted speedup) with the best expected tokens per second, k in 0..limit, draft i
        accepted at `rates[i]`; each draft attends to the `row_kv` cached tokens of its sequence."""
        plain = self.costs.cost(base_width, kv)
        best_k, best_gain = 0, 1.0
        for k in range(1, limit + 1):
            seconds = self.costs.cost(base_width + k, kv + k * row_kv) + self.speculation_cost(k)
            gain = expected_tokens_by_position(rates, k) * plain / seconds
            if gain > best_gain:
                best_k, best_gain = k, gain
        return best_k, best_gain

    def draft(self, candidates: list[tuple[Sequence, int]], room: int, extra_width: int = 0,
              extra_kv: int = 0) -> dict[str, list[int]]:
        """Draft lengths for decoding sequences (each with its tokens in the step), then drafts;
        `extra_width`, `extra_kv`: the step's prompt tokens and the cached tokens they attend to."""
        wanted = []
        width = extra_width + sum(base for _, base in candidates)
        kv = extra_kv + sum(len(seq.tokens) for seq, _ in candidates)
        for seq, _ in candidates:
            k = self.choose(seq, width, room, kv=kv)
            if k:
                wanted.append((seq, k))
                width += k
                kv += k * len(seq.tokens)
                room -= k
        if self.drafter.seconds_per_token() == 0.0:
            # A free drafter's guess for sequences not speculating keeps their acceptance current.
            chosen = {seq.id for seq, _ in wanted}
            idle = [(seq, 1) for seq, _ in candidates if seq.id not in chosen]
            for sid, guess in self.drafter.propose(idle).items() if idle else ():
                self.states[sid].shadow = guess[0] if guess else None
        if not wanted:
            return {}
        drafts = self.drafter.propose(wanted)
        return {sid: d for sid, d in drafts.items() if d}

    def draft_step(self, rows: list[Row], room: int) -> dict[str, list[int]]:
        """Drafts for a step's decoding sequences where speculation is predicted to pay; `room`: the
        tokens the batch and the KV cache take beyond the step's own."""
        candidates = [(r.seq, 1) for r in rows if r.seq.is_decoding and r.seq.speculate]
        if not candidates:
            return {}
        prompts = [r for r in rows if not (r.seq.is_decoding and r.seq.speculate)]
        return self.draft(candidates, room, extra_width=sum(r.end - r.start for r in prompts),
                          extra_kv=sum(kv_read(r.start, r.end - r.start) for r in prompts))

    def after_step(self, paces: list[tuple[Sequence, bool, int]], wall: float, decode_seconds: float,
                   rounds: int) -> None:
        """A step took `wall` seconds, `decode_seconds` of them in the target's pass, and ran `rounds`
        drafting rounds; each (sequence, drafted, tokens) got `tokens` tokens from it."""
        for seq, drafted, tokens in paces:
            self.record_pace(seq, drafted, wall, tokens)
        if rounds:
            # A drafter reading a new prompt is a one-off per request, not a cost per drafted token.
            self.record_overhead(rounds, wall - decode_seconds - self.drafter.catch_up_seconds)

    def settle_plain(self, seq: Sequence, token: int) -> None:
        """A plain step produced `token`: score the shadow guess, if there was one."""
        state = self.states.get(seq.id)
        if state is None:
            return
        state.predicted_tokens += 1.0
        state.predicted_cost += 1.0
        if state.shadow is not None:
            state.observe(1, int(token == state.shadow))
            state.shadow = None

    def record_pace(self, seq: Sequence, drafted: bool, seconds: float, tokens: int) -> None:
        state = self.states.get(seq.id)
        if state is not None:
            state.record_pace(drafted, seconds, tokens)

    def observe(self, seq: Sequence, k: int, accepted: int) -> None:
        state = self.states.get(seq.id)
        if state is None:  # the sequence ended during verification; its stats are already out
            return
        if self.costs.known():  # what the model expected of this step, before it learns from it
            width, kv = state.base_width, state.base_kv
            state.predicted_tokens += state.expected_tokens(k)
            state.predicted_cost += ((self.costs.cost(width + k, kv + k * state.row_kv) + self.speculation_cost(k))
                                     / self.costs.cost(width, kv))
        state.observe(k, accepted)
        state.drafted += k
        state.accepted += accepted
        state.steps += 1
        state.k_total += k

    def forget(self, seq: Sequence) -> SpecState | None:
        self.drafter.forget(seq)
        return self.states.pop(seq.id, None)
