"""PD split: long prompts are prefilled by a second worker and their KV moves to the decoding one.

Prefill is compute-bound and bursty, decode bandwidth-bound and steady; on one device a long
prefill stretches every streaming chat's steps. Here a prefill worker (its own llama.cpp context
on its own device, or its own CPU threads) reads a prompt in chunks while the engine's worker keeps
decoding. The finished prompt's KV state crosses through host memory (llama_state_seq_get_data /
set_data), guarded by a fingerprint of the model file, n_ctx and KV types. The last prompt token
is left for the decode side, so the logits the first answer token is sampled from are its own.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from ...errors import EngineError, KVHandoverError, LocalchatError
from ..events import PrefillProgress
from ..kv.kv_slots import KVOp, KVSlots
from ..sequence import KVHandover, Sequence
from .worker import BatchRow, Worker

log = logging.getLogger(__name__)


Deliver = Callable[[str, "KVHandover | None", "LocalchatError | None"], None]


def check_same_context(prefill: Worker, decode: Worker) -> None:
    """Refuse a worker pair whose KV states would not be interchangeable."""
    if prefill.fingerprint != decode.fingerprint:
        raise KVHandoverError(
            f"the prefill worker ({prefill.fingerprint}) and the decode worker ({decode.fingerprint}) differ; "
            "PD split needs the same model file, context size and KV types on both devices.")


class PrefillWorker:
    """A thread with its own worker: prefills prompts, shortest first, and hands their KV over."""

    def __init__(self, worker: Worker, deliver: Deliver) -> None:
        self.worker = worker
        self.kv = KVSlots(worker.config.n_seq_max, worker.n_ctx)  # its own prefix cache
        self.steps = 0
        self.step_log: list[tuple[float, float, int]] | None = None  # (start, seconds, tokens)
        self._deliver = deliver
        self._inbox: queue.Queue[tuple[str, object]] = queue.Queue()
        self._waiting: list[Sequence] = []
        self._running: list[Sequence] = []
        self._thread = threading.Thread(target=self._run, name="localchat-prefill", daemon=True)
        self._thread.start()

    def submit(self, seq: Sequence) -> None:
        """Prefill all but the last prompt token of `seq`; its stream gets the progress."""
        job = Sequence(id=seq.id, tokens=seq.tokens[: seq.num_prompt - 1], max_tokens=0, stream=seq.stream)
        self._inbox.put(("job", job))

    def cancel(self, request_id: str) -> None:
        """Drop a job; its cells are freed. Ids already handed over are ignored."""
        self._inbox.put(("cancel", request_id))

    def idle(self) -> bool:
        """No job waiting or running (read from another thread: a snapshot)."""
        return not self._waiting and not self._running and self._inbox.empty()

    def close(self) -> None:
        self._inbox.put(("close", None))
        self._thread.join()
        self.worker.close()

    # -- the prefill thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            block = not (self._waiting or self._running)
            try:
                while True:
                    kind, item = self._inbox.get(block=block)
                    block = False
                    if kind == "close":
                        return
                    if kind == "job":
                        self._waiting.append(item)
                    else:
                        self._drop(item)
            except queue.Empty:
                pass
            self._admit()
            if self._running:
                job = min(self._running, key=lambda s: s.num_pending)
                try:
                    self._chunk(job)
                except Exception as exc:  # a llama.cpp failure: fail this job, keep serving
                    log.exception("prefill step failed")
                    self._release(job, keep=False)
                    self._deliver(job.id, None, exc if isinstance(exc, LocalchatError)
                                  else EngineError(f"prefill failed: {exc!r}"))

    def _admit(self) -> None:
        # Cells are reserved for whole prompts, so running jobs can never run each other out of room.
        self._waiting.sort(key=lambda s: len(s.tokens))
        while self._waiting and self.kv.has_free_slot():
            job = self._waiting[0]
            reserved = sum(s.num_pending for s in self._running)
            source, _ = self.kv.best_prefix(job.tokens)
            protect = [source.id] if source is not None else []
            self._apply(self.kv.evict(reserved + len(job.tokens), protect))
            assigned = self.kv.assign(job)
            if assigned is None or self.kv.used_cells() + reserved + job.num_pending > self.worker.n_ctx:
                if assigned is not None:
                    self._apply(self.kv.release(job, keep=False))
                return
            self._apply(assigned[0])
            self._waiting.pop(0)
            self._running.append(job)

    def _chunk(self, job: Sequence) -> None:
        start = job.num_computed
        end = min(len(job.tokens), start + self.worker.config.n_batch)
        t0 = time.perf_counter()
        self.worker.decode([BatchRow(job.slot, job.tokens[start:end], start, want_logits=False)])
        seconds = time.perf_counter() - t0
        self.steps += 1
        if self.step_log is not None:
            self.step_log.append((t0, seconds, end - start))
        job.num_computed = end
        if end < len(job.tokens):
            job.stream.put(PrefillProgress(end, len(job.tokens) + 1))
            return
        t1 = time.perf_counter()
        data = self.worker.export_seq(job.slot)
        done = time.perf_counter()
        handover = KVHandover(self.worker.fingerprint, len(job.tokens), data, export_ms=(done - t1) * 1000)
        self._release(job, keep=True)
        self._deliver(job.id, handover, None)

    def _drop(self, request_id: str) -> None:
        for job in self._waiting:
            if job.id == request_id:
                self._waiting.remove(job)
                return
        for job in self._running:
            if job.id == request_id:
                self._release(job, keep=False)
                return

    def _release(self, job: Sequence, keep: bool) -> None:
        self._running.remove(job)
        self._apply(self.kv.release(job, keep))

    def _apply(self, ops: list[KVOp]) -> None:
        for op in ops:
            self.worker.apply(op)


class PDSplit:
    """The engine's side of the split: which prompts go to the prefill worker, and taking them back."""

    def __init__(self, prefill: Worker, decode: Worker, deliver: Deliver, min_tokens: int) -> None:
        check_same_context(prefill, decode)
        self.fingerprint = decode.fingerprint
        self.min_tokens = min_tokens
        self.prefill = PrefillWorker(prefill, deliver)
        self._away: set[str] = set()  # request ids with the prefill worker

    def offer(self, seq: Sequence, kv: KVSlots) -> bool:
        """Send `seq` to the prefill worker when the part of its prompt not resident here is long."""
        _, resident = kv.best_prefix(seq.tokens)
        if seq.num_prompt - resident < self.min_tokens:
            return False
        self._away.add(seq.id)
        self.prefill.submit(seq)
        return True

    def cancel(self, request_id: str) -> None:
        if request_id in self._away:
            self._away.discard(request_id)
            self.prefill.cancel(request_id)

    def take(self, request_id: str, handover: KVHandover | None, error: LocalchatError | None) -> bool:
        """True when the handed-over state belongs to a live request; raises the prefill's error,
        or KVHandoverError for state made by a context that is not interchangeable with this one."""
        if request_id not in self._away:
            return False  # cancelled while it was being prefilled: the state is dropped
        self._away.discard(request_id)
        if error is not None:
            raise error
        assert handover is not None
        if handover.fingerprint != self.fingerprint:
            raise KVHandoverError(
                f"the KV state was made by a different context ({handover.fingerprint}) than this one "
                f"({self.fingerprint}); it was not loaded.")
        return True

    def close(self) -> None:
        self.prefill.close()


def load_handover(worker: Worker, seq: Sequence, make_room: Callable[[], None]) -> bool:
    """Load a sequence's handed-over KV into its slot. llama.cpp needs one free run of cells for
    it: when there is none, idle prefixes are dropped (`make_room`) and it is tried once more."""
    handover, seq.kv_import = seq.kv_import, None
    t0 = time.perf_counter()
    loaded = worker.import_seq(seq.slot, handover.data)
    if not loaded:
        make_room()
        loaded = worker.import_seq(seq.slot, handover.data)
    if loaded and handover.num_state_tokens > handover.num_tokens:
        worker.seq_remove(seq.slot, handover.num_tokens, -1)
    seq.transfer_ms += (time.perf_counter() - t0) * 1000
    if not loaded:
        log.warning("no free run of %d KV cells for %s; its prompt is prefilled on the decode worker",
                    handover.num_tokens, seq.id)
    return loaded
