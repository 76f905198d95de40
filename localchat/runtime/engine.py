"""The Engine: the only entry to generation. submit() from any thread; one engine thread steps."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ContextOverflowError, EngineError, LocalchatError, RequestError
from .chat_template import ChatTemplate
from .disagg import PDSplit, load_handover
from .events import Done, Failed, PrefillProgress, Stream, TextDelta
from .kv_slots import KVOp
from .sampling import SamplingParams
from .scheduler import Scheduler, Step
from .draft_model import DraftModel
from .sequence import Sequence
from .speculative import Drafter, PromptLookup, SpecConfig, Speculator, StepCosts
from .text_output import TextOutput
from .threads import ThreadTuner, width_class
from .worker import BatchRow, Worker, WorkerConfig

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Request:
    """A chat (`messages`) or a raw completion (`prompt`), with its sampling parameters."""

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    id: str | None = None
    speculate: bool = True  # use the engine's drafter, when it has one


@dataclass(slots=True)
class EngineConfig:
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    step_budget: int = 0  # prompt tokens per step beside decoding sequences; 0 adapts
    lookup: bool = False  # prompt-lookup drafting
    draft_path: Path | None = None  # a draft model (same tokenizer); takes precedence over lookup
    spec: SpecConfig = field(default_factory=SpecConfig)
    # PD split: a second worker prefills prompts of at least `handover_min_tokens` uncached tokens
    # and hands their KV to the decoding worker (see disagg.py); None runs everything on one worker.
    prefill: WorkerConfig | None = None
    handover_min_tokens: int = 128
    draft_worker: WorkerConfig | None = None  # where the draft model runs; None: like the target
    adapt_threads: bool = True  # follow other programs taking cores (threads.py); False: fixed count


_ids = itertools.count(1)


class Engine:
    """Continuous batching over one Worker: many sequences, one llama_decode per step."""

    def __init__(self, worker: Worker, step_budget: int = 0, drafter: Drafter | None = None,
                 spec_config: SpecConfig | None = None, prefill_worker: Worker | None = None,
                 handover_min_tokens: int = 128, adapt_threads: bool = True) -> None:
        self.worker = worker
        self.n_ctx = worker.n_ctx
        self.scheduler = Scheduler(worker.n_ctx, worker.config.n_seq_max, worker.config.n_batch, step_budget)
        self.template = ChatTemplate(
            worker.chat_template(), worker.token_text(worker.bos_token) if worker.bos_token >= 0 else "",
            worker.token_text(worker.eos_token) if worker.eos_token >= 0 else "",
        )
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._by_id: dict[str, Sequence] = {}
        self.steps = 0  # steps run so far (tests and benchmarks read it)
        self.placement = "one worker"  # what runs where, in words (the CLI names the devices)
        self.step_log: list[tuple[float, float, int, int]] | None = None  # (start, seconds, tokens, decode rows)
        # Thread counts tuned per class of step width (threads.py); None keeps the configured count.
        self.tuners: dict[int, ThreadTuner] | None = {} if adapt_threads else None
        self.speculator: Speculator | None = None
        if drafter is not None:
            self.speculator = Speculator(drafter, StepCosts(), spec_config or SpecConfig())
        self.pd: PDSplit | None = None
        if prefill_worker is not None:
            self.pd = PDSplit(prefill_worker, worker, self._handed_over, handover_min_tokens)
            self.placement = "prefill and decode workers"
        self._thread = threading.Thread(target=self._run, name="localchat-engine", daemon=True)
        self._closed = False
        self._thread.start()

    @classmethod
    def load(cls, model_path: str | Path, config: EngineConfig | None = None) -> "Engine":
        """Load a model file into a worker and start the engine thread."""
        config = config or EngineConfig()
        loaded: list[Worker] = []
        try:
            worker = Worker(model_path, config.worker)
            loaded.append(worker)
            drafter: Drafter | None = PromptLookup() if config.lookup else None
            if config.draft_path is not None:
                loaded.append(Worker(config.draft_path, config.draft_worker or config.worker))
                drafter = DraftModel(loaded[-1], worker)
            prefill = None
            if config.prefill is not None:
                prefill = Worker(model_path, config.prefill)
                loaded.append(prefill)
            return cls(worker, config.step_budget, drafter, config.spec, prefill, config.handover_min_tokens,
                       config.adapt_threads)
        except LocalchatError:
            for each in loaded:
                each.close()
            raise

    # -- the public, thread-safe surface ----------------------------------------------------

    def prompt_tokens(self, request: Request) -> list[int]:
        """The tokens a request's prompt becomes (the chat template applied)."""
        if request.messages is not None:
            text = self.template.render(request.messages)
        elif isinstance(request.prompt, str) and request.prompt:
            text = request.prompt
        else:
            raise RequestError("a request needs messages or a non-empty prompt.")
        add_bos = self.worker.add_bos and not text.startswith(self.template.bos_token or "\0")
        return self.worker.tokenize(text, add_special=add_bos, parse_special=True)

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes inside a prompt (no BOS, special tokens as plain text)."""
        return len(self.worker.tokenize(text, add_special=False, parse_special=False))

    def submit(self, request: Request) -> Stream:
        """Queue a request; its events arrive on the returned stream. Bad requests raise here."""
        if self._closed:
            raise EngineError("the engine is shut down; start a new one.")
        params = request.sampling
        params.validate()
        tokens = self.prompt_tokens(request)
        room = self.n_ctx - len(tokens)
        max_tokens = params.max_tokens if params.max_tokens is not None else room
        if room < 1 or max_tokens > room:
            raise ContextOverflowError(
                f"the prompt is {len(tokens)} tokens and max_tokens is {max_tokens}, but the context "
                f"window holds {self.n_ctx}. Shorten the prompt or lower max_tokens"
                + (f", or raise n_ctx (the model was trained for {self.worker.n_ctx_train})."
                   if self.worker.n_ctx_train > self.n_ctx else ".")
            )
        request_id = request.id or f"req-{next(_ids)}"
        stream = Stream(request_id, self.cancel)
        seq = Sequence(id=request_id, tokens=tokens, max_tokens=max_tokens, stream=stream,
                       output=TextOutput(list(params.stop)), ignore_eos=params.ignore_eos,
                       speculate=request.speculate)
        seq.sampler = self.worker.new_sampler(params)
        self._inbox.put(("submit", seq))
        return stream

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step boundary; its KV is freed. Unknown ids are ignored."""
        self._inbox.put(("cancel", request_id))

    def close(self) -> None:
        """Stop the engine thread, end every open stream, free llama.cpp."""
        if self._closed:
            return
        self._closed = True
        self._inbox.put(("close", None))
        self._thread.join()
        if self.pd is not None:
            self.pd.close()
        self.worker.close()
        close_drafter = getattr(self.speculator.drafter, "close", None) if self.speculator else None
        if close_drafter:
            close_drafter()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        # Every llama.cpp computation runs on this one thread: OpenMP keeps a thread team per
        # calling thread, and a second team left over from another thread slows each step 2-3x.
        if self.speculator is not None:
            self.speculator.calibrate(self.worker)
        while True:
            block = not self.scheduler.has_work()
            try:
                while True:
                    kind, item = self._inbox.get(block=block)
                    block = False
                    if kind == "close":
                        self._shutdown()
                        return
                    self._take(kind, item)
            except queue.Empty:
                pass
            if self.scheduler.has_work():
                try:
                    self._step()
                except Exception as exc:  # a bug or a llama.cpp failure: fail the work, keep serving
                    log.exception("engine step failed")
                    self._fail_all(exc if isinstance(exc, LocalchatError) else EngineError(f"internal error: {exc!r}"))

    def _take(self, kind: str, item: Any) -> None:
        if kind == "submit":
            self._by_id[item.id] = item
            if self.pd is not None and self.pd.offer(item, self.scheduler.kv):
                item.t_start = time.perf_counter()
                item.stream.put(PrefillProgress(0, item.num_prompt))
            else:
                self.scheduler.add(item)
        elif kind == "cancel":
            seq = self._by_id.get(item)
            if seq is not None:
                if self.pd is not None:
                    self.pd.cancel(item)
                self._end(seq, "cancelled", keep_kv=False)
        elif kind == "handover":
            self._receive(*item)

    def _handed_over(self, request_id: str, handover: Any, error: LocalchatError | None) -> None:
        """Called on the prefill thread: the rest happens on this engine's thread."""
        self._inbox.put(("handover", (request_id, handover, error)))

    def _receive(self, request_id: str, handover: Any, error: LocalchatError | None) -> None:
        seq = self._by_id.get(request_id)
        if seq is None:
            return  # cancelled meanwhile: the state is dropped
        try:
            if not self.pd.take(request_id, handover, error):
                return
        except LocalchatError as exc:
            self._by_id.pop(request_id, None)
            seq.sampler.close()
            seq.stream.put(Failed(exc))
            return
        seq.kv_import = handover
        seq.transfer_ms, seq.transfer_bytes = handover.export_ms, len(handover.data)
        self.scheduler.add(seq)

    def _step(self) -> None:
        step = self.scheduler.schedule()
        self._apply(step.ops, step)
        now = time.perf_counter()
        for seq, reused in step.admitted:
            if not seq.t_start:
                seq.t_start = now
                seq.num_cached = reused
                seq.stream.put(PrefillProgress(reused, seq.num_prompt))
        if not step.rows:
            return
        self._decode(step)

    def _decode(self, step: Step) -> None:
        rows = step.rows
        t_step = time.perf_counter()
        drafts = self._drafts(step)
        batch = [BatchRow(r.seq.slot, r.seq.tokens[r.start:r.end] + drafts.get(r.seq.id, []), r.start,
                          r.want_logits, all_logits=r.seq.id in drafts) for r in rows]
        width = sum(len(b.tokens) for b in batch)
        t0 = time.perf_counter()
        tuner = self._tuner(width, t0)
        last = self.worker.decode(batch)
        seconds = time.perf_counter() - t0
        if tuner is not None:
            tuner.record(self.worker.threads[width > 1], seconds, t0 + seconds)
        self.steps += 1
        self.scheduler.budget.record(step.num_tokens, step.num_decode_rows, seconds)
        if step.num_decode_rows == 0:  # prompt tokens alone: their cost grows with the context read so far
            for row in rows:
                row.seq.prompt_token_seconds = seconds / step.num_tokens
        if self.speculator is not None and step.num_decode_rows == len(rows):
            self.speculator.costs.record(width, seconds)
        if self.step_log is not None:
            self.step_log.append((t0, seconds, width, step.num_decode_rows))
        emitted = {}
        for row, index in zip(rows, last):
            seq = row.seq
            before = seq.num_generated
            draft = drafts.get(seq.id)
            if draft:
                self._verify(seq, row.start, index, draft)
            else:
                seq.num_computed = row.end
                if row.want_logits:
                    token = self.worker.sample(seq.sampler, index)
                    if self.speculator is not None and seq.is_decoding:
                        self.speculator.settle_plain(seq, token)
                    self._on_token(seq, token)
                elif seq.num_computed < seq.num_prompt:
                    seq.stream.put(PrefillProgress(seq.num_computed, seq.num_prompt))
            if before and seq.speculate:
                emitted[seq.id] = (seq, seq.num_generated - before)
        if self.speculator is not None:
            wall = time.perf_counter() - t_step
            for seq, tokens in emitted.values():
                self.speculator.record_pace(seq, seq.id in drafts, wall, tokens)
        if drafts:
            # A drafter reading a new prompt is a one-off per request, not a cost per drafted token.
            catch_up = getattr(self.speculator.drafter, "catch_up_seconds", 0.0)
            outside = time.perf_counter() - t_step - seconds - catch_up
            self.speculator.record_overhead(max(len(d) for d in drafts.values()), outside)

    def _tuner(self, width: int, now: float) -> ThreadTuner | None:
        """Set the threads for a step of `width` tokens; the tuner that will hear how it went.
        (llama.cpp keeps one count for single tokens and one for batches.)"""
        if self.tuners is None:
            return None
        kind = width_class(width)
        tuner = self.tuners.get(kind)
        if tuner is None:
            tuner = self.tuners[kind] = ThreadTuner(self.worker.max_threads, now, react_to_slowdown=kind == 1)
        threads = tuner.choose(now)
        single, batch = self.worker.threads
        self.worker.set_threads(threads if width == 1 else single, threads if width > 1 else batch)
        return tuner

    def _drafts(self, step: Step) -> dict[str, list[int]]:
        """Draft tokens for this step's decoding sequences, where speculation is predicted to pay."""
        if self.speculator is None:
            return {}
        candidates = [(r.seq, 1) for r in step.rows if r.seq.is_decoding and r.seq.speculate]
        if not candidates:
            return {}
        prefill = step.num_tokens - len(candidates)
        room = min(self.worker.config.n_batch - step.num_tokens,
                   self.n_ctx - self.scheduler.kv.used_cells() - step.num_tokens)
        drafts = self.speculator.draft(candidates, room, extra_width=prefill)
        return {sid: d for sid, d in drafts.items() if d}

    def _verify(self, seq: Sequence, pos: int, last: int, draft: list[int]) -> None:
        """Sample the target at each drafted position; keep drafts while they match its samples."""
        slot, k = seq.slot, len(draft)
        first = last - k
        accepted = 0
        for i in range(k + 1):
            seq.num_computed = pos + i + 1  # the row's tokens up to i are the sequence's own
            token = self.worker.sample(seq.sampler, first + i)
            if not self._on_token(seq, token) or i == k or token != draft[i]:
                break
            accepted += 1
        self.worker.seq_remove(slot, pos + accepted + 1, -1)  # the rejected drafts' KV
        self.speculator.observe(seq, k, accepted)

    def _on_token(self, seq: Sequence, token: int) -> bool:
        """Emit one sampled token; False when it ended the sequence."""
        if seq.num_generated == 0:
            seq.t_first_token = time.perf_counter()
            seq.stream.put(PrefillProgress(seq.num_prompt, seq.num_prompt))
        if self.worker.is_eog(token) and not seq.ignore_eos:
            self._end(seq, "stop", keep_kv=True)
            return False
        seq.tokens.append(token)
        text = seq.output.feed(self.worker.token_bytes(token))
        if text:
            seq.stream.put(TextDelta(text))
        if seq.output.stopped:
            self._end(seq, "stop", keep_kv=True)
        elif seq.num_generated >= seq.max_tokens:
            self._end(seq, "length", keep_kv=True)
        else:
            return True
        return False

    def _end(self, seq: Sequence, reason: str, keep_kv: bool) -> None:
        self._apply(self.scheduler.finish(seq, keep_kv))
        self._by_id.pop(seq.id, None)
        seq.sampler.close()
        tail = seq.output.finish() if reason != "cancelled" else ""
        if tail:
            seq.stream.put(TextDelta(tail))
        spec = self.speculator.forget(seq) if self.speculator is not None else None
        seq.stream.put(seq.stats(spec.stats(self.speculator.drafter.name) if spec is not None else None))
        seq.stream.put(Done(reason, seq.generated))

    def _apply(self, ops: list[KVOp], step: Step | None = None) -> None:
        for op in ops:
            if op.kind == "import":
                self._import(op.payload, step)
            else:
                self.worker.apply(op)

    def _import(self, seq: Sequence, step: Step | None) -> None:
        if not load_handover(self.worker, seq, lambda: self._apply(self.scheduler.kv.evict(self.n_ctx))):
            seq.num_computed = 0  # no room for the state after all: the prompt is prefilled here
            if step is not None:
                step.rows = [r for r in step.rows if r.seq is not seq]

    def _fail_all(self, error: LocalchatError) -> None:
        for seq in list(self._by_id.values()):
            if self.pd is not None:
                self.pd.cancel(seq.id)
            self._apply(self.scheduler.finish(seq, keep_kv=False))
            seq.sampler.close()
            seq.stream.put(Failed(error))
        self._by_id.clear()

    def _shutdown(self) -> None:
        self._fail_all(EngineError("the engine was shut down before this request finished."))
