"""One engine step: the scheduler's plan run on the worker, and what each row's logits make of its
sequence (prompt progress, a sampled token, verified drafts), delivered to the request's stream.

Runs on the engine thread only (engine.py owns the thread, the inbox and the public surface).
"""

from __future__ import annotations

import time

from .events import Done, PrefillProgress, TextDelta
from .kv.kv_disk import KVDiskCache
from .kv.kv_slots import Import, KVOp
from .scheduler import Row, Scheduler, Step
from .sequence import Sequence
from .speculation.speculative import Speculator
from .step_clock import StepClock
from .step_meter import StepMeter
from .workers.disagg import load_handover
from .workers.worker import BatchRow, Worker


class StepRunner:
    """Steps the scheduler's sequences; `live` maps the engine's request ids to their sequences."""

    def __init__(self, worker: Worker, scheduler: Scheduler, speculator: Speculator | None, meter: StepMeter,
                 live: dict[str, Sequence], kv_disk: KVDiskCache | None = None, clock: StepClock | None = None) -> None:
        self.worker = worker
        self.clock = clock  # told what each step holds, for a runner's watchdog
        self.n_ctx = worker.n_ctx
        self.scheduler = scheduler
        self.speculator = speculator
        self.meter = meter
        self.live = live
        self.kv_disk = kv_disk

    def step(self) -> None:
        """Plan a step, run its KV operations, decode its rows and deliver what came of them."""
        step = self.scheduler.schedule()  # the rows of this step and the KV operations they need
        if self.clock is not None:
            self.clock.planned(step)
        self.apply(step.ops, step)
        now = time.perf_counter()
        for seq, reused in step.admitted:
            if not seq.t_start:
                seq.t_start = now
                seq.num_cached = reused
                seq.stream.put(PrefillProgress(reused, seq.num_prompt))
        if step.rows:
            self._decode(step)

    def _decode(self, step: Step) -> None:
        """One llama_decode over every row (decoding sequences with their drafts, prompt chunks),
        then what each row's logits make of its sequence."""
        t_step = time.perf_counter()
        drafts = self.speculator.draft_step(step.rows, self._draft_room(step)) if self.speculator else {}
        batch = [BatchRow(r.seq.slot, r.seq.tokens[r.start:r.end] + drafts.get(r.seq.id, []), r.start,
                          r.want_logits, all_logits=r.seq.id in drafts) for r in step.rows]
        last, seconds = self.meter.run(step, batch)
        paces = []  # (sequence, drafted, tokens it got) of decoding sequences, for the speculator
        for row, index in zip(step.rows, last):
            before = row.seq.num_generated
            self._advance(row, index, drafts.get(row.seq.id))
            if before and row.seq.speculate:
                paces.append((row.seq, row.seq.id in drafts, row.seq.num_generated - before))
        if self.speculator is not None:
            rounds = max((len(d) for d in drafts.values()), default=0)
            self.speculator.after_step(paces, time.perf_counter() - t_step, seconds, rounds)

    def _draft_room(self, step: Step) -> int:
        """Draft tokens the batch and the KV cache still take beside the step's own tokens."""
        return min(self.worker.config.n_batch - step.num_tokens,
                   self.n_ctx - self.scheduler.kv.used_cells() - step.num_tokens)

    def _advance(self, row: Row, index: int, draft: list[int] | None) -> None:
        """A row after the decode: its drafts verified, a token sampled, or the prompt read further."""
        seq = row.seq
        if draft:
            self._verify(seq, row.start, index, draft)
            return
        decoding = seq.is_decoding  # asked before the row's tokens count as computed
        seq.num_computed = row.end
        if row.end == seq.num_prompt and self.kv_disk is not None and self.kv_disk.wants(seq.num_prompt - seq.num_cached):
            # The prompt is read and nothing generated yet: its cells are exactly the prompt's.
            self.kv_disk.save(seq.tokens[:seq.num_prompt], self.worker.export_seq(seq.slot))
        if row.want_logits:
            token = self.worker.sample(seq.sampler, index)
            if self.speculator is not None and decoding:
                self.speculator.settle_plain(seq, token)
            self._on_token(seq, token, index)
        elif seq.num_computed < seq.num_prompt:
            seq.stream.put(PrefillProgress(seq.num_computed, seq.num_prompt))

    def _verify(self, seq: Sequence, pos: int, last: int, draft: list[int]) -> None:
        """Sample the target at each drafted position; keep drafts while they match its samples."""
        slot, k = seq.slot, len(draft)
        first = last - k
        accepted = 0
        for i in range(k + 1):
            seq.num_computed = pos + i + 1  # the row's tokens up to i are the sequence's own
            token = self.worker.sample(seq.sampler, first + i)
            if not self._on_token(seq, token, first + i) or i == k or token != draft[i]:
                break
            accepted += 1
        self.worker.seq_remove(slot, pos + accepted + 1, -1)  # the rejected drafts' KV
        self.speculator.observe(seq, k, accepted)

    def _on_token(self, seq: Sequence, token: int, index: int) -> bool:
        """Emit one token sampled at batch position `index`; False when it ended the sequence."""
        if seq.num_generated == 0:
            seq.t_first_token = time.perf_counter()
            seq.stream.put(PrefillProgress(seq.num_prompt, seq.num_prompt))
        if self.worker.is_eog(token) and not seq.ignore_eos:
            self.end(seq, "stop", keep_kv=True)
            return False
        seq.tokens.append(token)
        if seq.num_logprobs is not None:  # the target's own distribution, drafted token or not
            seq.logprobs.append(self.worker.logprob(index, token, seq.num_logprobs))
        text = seq.output.feed(self.worker.token_bytes(token))
        if text:
            seq.stream.put(TextDelta(text, seq.logprobs))
            seq.logprobs = []
        if seq.output.stopped:
            self.end(seq, "stop", keep_kv=True)
        elif seq.num_generated >= seq.max_tokens:
            self.end(seq, "length", keep_kv=True)
        else:
            return True
        return False

    def end(self, seq: Sequence, reason: str, keep_kv: bool) -> None:
        """Finish a sequence: keep or free its KV, flush its text, send its stats and Done."""
        self.apply(self.scheduler.finish(seq, keep_kv))
        self.live.pop(seq.id, None)
        seq.sampler.close()
        tail = seq.output.finish() if reason != "cancelled" else ""
        if tail:
            seq.stream.put(TextDelta(tail, seq.logprobs))
        spec = self.speculator.forget(seq) if self.speculator is not None else None
        seq.stream.put(seq.stats(spec.stats(self.speculator.drafter.name) if spec is not None else None))
        seq.stream.put(Done(reason, seq.tokens[seq.num_prompt - seq.num_forced:],
                            seq.output.matched if reason == "stop" else None))

    def apply(self, ops: list[KVOp], step: Step | None = None) -> None:
        """Run the slot table's KV operations; a sequence whose import finds no room leaves `step`."""
        for op in ops:
            if isinstance(op, Import):
                self._import(op.seq, step)
            else:
                self.worker.apply(op)

    def _import(self, seq: Sequence, step: Step | None) -> None:
        if not load_handover(self.worker, seq, lambda: self.apply(self.scheduler.kv.evict(self.n_ctx))):
            seq.num_computed = 0  # no room for the state after all: the prompt is prefilled here
            if step is not None:
                step.rows = [r for r in step.rows if r.seq is not seq]
