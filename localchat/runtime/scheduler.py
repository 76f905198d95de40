"""The step planner: decodes first, then prompt chunks up to a token budget (chunked prefill).

Pure Python, no llama_cpp import: the engine executes what `schedule()` returns.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import count

from ..errors import EngineError
from .kv.kv_slots import KVOp, KVSlots
from .sequence import Sequence


@dataclass(slots=True)
class Row:
    """`seq`'s tokens [start, end) go into this step; logits when `end` reaches its last token."""

    seq: Sequence
    start: int
    end: int

    @property
    def want_logits(self) -> bool:
        return self.end == len(self.seq.tokens)


@dataclass(slots=True)
class Step:
    ops: list[KVOp] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    admitted: list[tuple[Sequence, int]] = field(default_factory=list)  # (sequence, reused tokens)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(r.end - r.start for r in self.rows)

    @property
    def num_decode_rows(self) -> int:
        return sum(1 for r in self.rows if r.seq.is_decoding)


class StepBudget:
    """How many prompt tokens a step may carry while other sequences are decoding.

    Fixed when configured; otherwise it adapts so a mixed step costs about `latency_factor` times
    a decode-only step, measured on this machine: streaming chats stay fluid beside a long prefill.

    With nothing decoding a step reads a whole batch (n_batch tokens): that is the speed llama.cpp's
    kernels are built for (below 64 tokens its flash attention falls back to a per-row kernel, and
    small matrix products waste the cores), and a chat that arrives waits at most that one step.
    """

    def __init__(self, n_batch: int, fixed: int = 0, latency_factor: float = 2.5, minimum: int = 1) -> None:
        self.n_batch = n_batch
        self.fixed = fixed
        self.latency_factor = latency_factor
        self.minimum = min(minimum, n_batch)
        self.current = fixed or min(4, n_batch)
        self.decode_seconds: float | None = None  # a decode-only step
        self.token_seconds: float | None = None  # a prompt token in a step beside decoding rows

    def record(self, num_tokens: int, num_decode_rows: int, seconds: float) -> None:
        """Learn from a step that carried decoding rows: a decode-only step sets the reference
        cost; a mixed one the cost of a prompt token beside them, from which the budget follows."""
        if num_decode_rows == 0:
            return
        if num_tokens == num_decode_rows:  # a decode-only step: the reference cost
            prev = self.decode_seconds
            self.decode_seconds = seconds if prev is None else 0.9 * prev + 0.1 * seconds
            return
        if self.fixed or self.decode_seconds is None:
            return
        # A prompt token's cost grows with the context read so far: the average follows it. A few
        # tokens' cost hides in the noise of the decode step's, so the budget at most doubles a step:
        # one step past the target is the most a too-low estimate costs, and it corrects the estimate.
        per_token = max(seconds - self.decode_seconds, 1e-6) / (num_tokens - num_decode_rows)
        prev = self.token_seconds
        self.token_seconds = per_token if prev is None else 0.5 * prev + 0.5 * per_token
        room = (self.latency_factor - 1) * self.decode_seconds
        self.current = max(self.minimum, min(self.n_batch, int(room / self.token_seconds), 2 * self.current))


class Scheduler:
    """Admits waiting sequences into slots, plans each step's rows, preempts when the KV runs out."""

    def __init__(self, n_ctx: int, n_seq_max: int, n_batch: int, step_budget: int = 0) -> None:
        self.kv = KVSlots(n_seq_max, n_ctx)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.budget = StepBudget(n_batch, step_budget)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._admissions = count()

    def add(self, seq: Sequence) -> None:
        assert len(seq.tokens) + seq.max_tokens - seq.num_generated <= self.n_ctx
        self.waiting.append(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, keep_kv: bool) -> list[KVOp]:
        """Take a sequence out (finished or cancelled); returns the cache operations to run."""
        if seq in self.running:
            self.running.remove(seq)
            return self.kv.release(seq, keep_kv)
        if seq in self.waiting:
            self.waiting.remove(seq)
        return []

    def schedule(self) -> Step:
        step = Step()
        self._admit(step)
        if self.waiting and not self.running:
            # Nothing running will free a cell or a slot: waiting would spin forever. Never expected
            # (a lone request always fits: it was checked on submit); if it happens, the requests fail.
            raise EngineError(f"internal error: {len(self.waiting)} request(s) could not be given room in the "
                              "KV cache; try again.")
        while True:
            self._plan_rows(step)
            need = step.num_tokens
            if self.n_ctx - self.kv.used_cells() >= need:
                return step
            step.ops += self.kv.evict(need)
            if self.n_ctx - self.kv.used_cells() >= need:
                return step
            assert len(self.running) > 1, "a lone sequence always fits: requests are checked on submit"
            youngest = max(self.running, key=lambda s: s.admitted_at)
            step.ops += self.finish(youngest, keep_kv=False)
            youngest.num_computed = 0
            self.waiting.appendleft(youngest)
            step.preempted.append(youngest)

    def _admit(self, step: Step) -> None:
        while self.waiting:
            seq = self.waiting[0]
            assigned = self.kv.assign(seq)
            if assigned is None:
                return
            ops, reused = assigned
            seq.prefill_start = seq.num_computed
            self.waiting.popleft()
            seq.admitted_at = next(self._admissions)
            self.running.append(seq)
            step.ops += ops
            step.admitted.append((seq, reused))

    def _plan_rows(self, step: Step) -> None:
        decoding = [s for s in self.running if s.num_pending == 1]
        rows = [Row(s, s.num_computed, s.num_computed + 1) for s in decoding]
        # Shortest prompt first: a chat message is not queued behind a long document.
        prefilling = sorted((s for s in self.running if s.num_pending > 1), key=lambda s: s.num_pending)
        # A short prompt is one that arrived short: the tail of a long document is not, since late in a
        # long context its last tokens cost far more per token than a chat message does.
        short = self.n_batch // 4
        is_short = {s.id: s.num_pending <= short and s.num_computed == s.prefill_start for s in prefilling}
        interactive = bool(decoding) or any(is_short.values())
        room = self.n_batch - len(rows)
        budget = min(self.budget.current if interactive else self.n_batch, room) if prefilling else 0
        for seq in prefilling:
            if is_short[seq.id]:
                take = min(seq.num_pending, room)  # a short prompt is finished in one step
            else:
                take = min(seq.num_pending, budget, room)
            if take <= 0:
                continue
            rows.append(Row(seq, seq.num_computed, seq.num_computed + take))
            room -= take
            budget -= take
        step.rows = rows
