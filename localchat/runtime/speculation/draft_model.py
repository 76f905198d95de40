"""A draft model in its own worker: a smaller GGUF with the target's tokenizer proposes tokens."""

from __future__ import annotations

import time

from ...errors import DraftIncompatibleError
from ..kv.kv_slots import common_prefix
from ..sampling import SamplingParams
from ..sequence import Sequence
from ..workers.worker import BatchRow, Worker

# llama.cpp's own rule for speculative pairs: same vocabulary type and special tokens, sizes within
# 128, and identical token text from id 5 up (ids below may be model-specific control tokens).
MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_COMPARED_TOKEN = 5
CATCH_UP_CHUNK = 64  # draft-side prompt tokens per step, so catching up never stalls a stream


def check_compatible(target: Worker, draft: Worker) -> None:
    """Refuse a draft whose tokenizer differs from the target's, naming the mismatch."""
    import llama_cpp

    def fail(what: str) -> None:
        raise DraftIncompatibleError(
            f"the draft model {draft.model_path.name} cannot draft for {target.model_path.name}: {what}. "
            "Use a smaller model of the same family (same tokenizer), or run without --draft.")

    if llama_cpp.llama_vocab_type(target.vocab) != llama_cpp.llama_vocab_type(draft.vocab):
        fail("their vocabulary types differ")
    if (target.bos_token, target.eos_token) != (draft.bos_token, draft.eos_token) \
            or target.add_bos != draft.add_bos:
        fail(f"their BOS/EOS tokens differ ({target.bos_token}/{target.eos_token} vs "
             f"{draft.bos_token}/{draft.eos_token})")
    if abs(target.n_vocab - draft.n_vocab) > MAX_VOCAB_SIZE_DIFFERENCE:
        fail(f"their vocabulary sizes differ by more than {MAX_VOCAB_SIZE_DIFFERENCE} "
             f"({target.n_vocab} vs {draft.n_vocab})")
    for token in range(FIRST_COMPARED_TOKEN, min(target.n_vocab, draft.n_vocab)):
        if target.token_text(token) != draft.token_text(token):
            fail(f"token {token} is {target.token_text(token)!r} in one and {draft.token_text(token)!r} in the other")


class DraftModel:
    """Greedy drafts from a second worker whose KV mirrors each target slot's accepted tokens."""

    name = "draft-model"

    def __init__(self, draft: Worker, target: Worker) -> None:
        check_compatible(target, draft)
        self.worker = draft
        self._greedy = draft.new_sampler(SamplingParams(temperature=0.0))
        self._resident: dict[int, list[int]] = {}  # draft slot -> tokens in the draft's KV
        self._round_seconds: float | None = None
        self.catch_up_seconds = 0.0  # spent in the last propose() reading prompt tokens, not drafting

    def seconds_per_token(self) -> float:
        """Measured cost of one drafting round (one more token for every drafting sequence)."""
        return self._round_seconds if self._round_seconds is not None else 0.0

    def calibrate(self) -> None:
        """Time a few one-token decodes so the first choices have a real cost to weigh."""
        token = self.worker.bos_token if self.worker.bos_token >= 0 else 0
        self.worker.decode([BatchRow(0, [token], 0, True)])  # warm up
        t0 = time.perf_counter()
        for pos in range(1, 4):
            self.worker.decode([BatchRow(0, [token], pos, True)])
        self._round_seconds = (time.perf_counter() - t0) / 3
        self.worker.seq_remove(0)
        self._resident.pop(0, None)

    def propose(self, wanted: list[tuple[Sequence, int]]) -> dict[str, list[int]]:
        self.catch_up_seconds = 0.0
        self._make_room(wanted)
        drafts: dict[str, list[int]] = {seq.id: [] for seq, _ in wanted}
        rows, ready = [], []
        for seq, _ in wanted:
            slot, tokens = seq.slot, seq.tokens
            kept = min(common_prefix(self._resident.get(slot, []), tokens), len(tokens) - 1)
            self.worker.seq_remove(slot, kept, -1)
            todo = tokens[kept:]
            if len(todo) > CATCH_UP_CHUNK:  # a long prompt: catch up this step, draft in later ones
                rows.append(BatchRow(slot, todo[:CATCH_UP_CHUNK], kept, False))
                self._resident[slot] = tokens[: kept + CATCH_UP_CHUNK]
                continue
            rows.append(BatchRow(slot, todo, kept, True))
            self._resident[slot] = list(tokens)
            ready.append((seq, len(rows) - 1))
        if rows:
            t0 = time.perf_counter()
            last = self.worker.decode(rows)
            for seq, row in ready:
                drafts[seq.id].append(self.worker.sample(self._greedy, last[row]))
            if ready and all(len(row.tokens) <= 2 for row in rows):  # a drafting round, not catch-up
                self._time_round(time.perf_counter() - t0)
            else:
                self.catch_up_seconds = time.perf_counter() - t0
        for step in range(1, max((k for _, k in wanted), default=0)):
            active = [seq for seq, k in wanted if len(drafts[seq.id]) == step and k > step]
            if not active:
                break
            rows = [BatchRow(seq.slot, [drafts[seq.id][-1]], len(seq.tokens) + step - 1, True) for seq in active]
            t0 = time.perf_counter()
            last = self.worker.decode(rows)
            self._time_round(time.perf_counter() - t0)
            for seq, index in zip(active, last):
                self._resident[seq.slot].append(drafts[seq.id][-1])
                drafts[seq.id].append(self.worker.sample(self._greedy, index))
        return drafts

    def forget(self, seq: Sequence) -> None:
        """Nothing to drop: the slot's tokens stay for the next request's prefix."""

    def _time_round(self, seconds: float) -> None:
        prev = self._round_seconds
        self._round_seconds = seconds if prev is None else 0.8 * prev + 0.2 * seconds

    def _make_room(self, wanted: list[tuple[Sequence, int]]) -> None:
        """Drop other slots' draft KV when the draft context would overflow."""
        busy = {seq.slot for seq, _ in wanted}
        need = sum(len(seq.tokens) + k for seq, k in wanted)
        used = sum(len(tokens) for slot, tokens in self._resident.items() if slot in busy)
        for slot in [s for s in self._resident if s not in busy]:
            if used + need + sum(len(t) for s, t in self._resident.items() if s not in busy) <= self.worker.n_ctx:
                break
            self.worker.seq_remove(slot)
            del self._resident[slot]

    def close(self) -> None:
        self._greedy.close()
        self.worker.close()
