"""One batch through the worker, timed: the thread count tuned for the step's width (threads.py),
and what the step's time teaches the step budget, the speculator's cost table and the step log."""

from __future__ import annotations

import time

from .backends.threads import ThreadTuner, width_class
from .scheduler import Step, StepBudget
from .step_costs import StepCosts, kv_read
from .workers.worker import BatchRow, Worker


class StepMeter:
    """Runs the engine's batches and keeps count: `steps`, and `step_log` when a test or the wizard
    sets it to a list."""

    def __init__(self, worker: Worker, budget: StepBudget, costs: StepCosts | None, adapt_threads: bool) -> None:
        self.worker = worker
        self.budget = budget
        self.costs = costs  # the speculator's, when there is one
        self.steps = 0
        self.step_log: list[tuple[float, float, int, int]] | None = None  # (start, seconds, tokens, decode rows)
        # Thread counts tuned per class of step width; None keeps the configured count.
        self.tuners: dict[int, ThreadTuner] | None = {} if adapt_threads else None

    def run(self, step: Step, batch: list[BatchRow]) -> tuple[list[int], float]:
        """Decode `batch` (the step's rows, drafts included): each row's last batch index, and the seconds."""
        width = sum(len(row.tokens) for row in batch)
        t0 = time.perf_counter()
        tuner = self._tuner(width, t0)
        last = self.worker.decode(batch)
        seconds = time.perf_counter() - t0
        if tuner is not None:
            changes = tuner.changes
            tuner.record(self.worker.threads[width > 1], seconds, t0 + seconds)
            if width == 1 and tuner.changes != changes:  # single tokens see other programs first
                for other in self.tuners.values():
                    if other is not tuner:
                        other.hint(tuner.threads)
        self.steps += 1
        self.budget.record(step.num_tokens, step.num_decode_rows, seconds)
        if self.costs is not None and step.num_decode_rows == len(step.rows):
            self.costs.record(width, seconds, sum(kv_read(row.pos, len(row.tokens)) for row in batch))
        if self.step_log is not None:
            self.step_log.append((t0, seconds, width, step.num_decode_rows))
        return last, seconds

    def _tuner(self, width: int, now: float) -> ThreadTuner | None:
        """Set the threads for a step of `width` tokens; the tuner that will hear how it went.
        (llama.cpp keeps one count for single tokens and one for batches.)"""
        if self.tuners is None:
            return None
        kind = width_class(width)
        tuner = self.tuners.get(kind)
        if tuner is None:
            tokens = self.tuners.get(1)  # a new kind of step starts where single tokens found the cores
            tuner = self.tuners[kind] = ThreadTuner(self.worker.max_threads, now, react_to_slowdown=kind == 1,
                                                    threads=tokens.threads if tokens is not None else None)
        threads = tuner.choose(now)
        single, batch = self.worker.threads
        self.worker.set_threads(threads if width == 1 else single, threads if width > 1 else batch)
        return tuner
