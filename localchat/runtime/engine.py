"""The Engine: the only entry to generation. submit() from any thread; one engine thread steps."""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ContextOverflowError, EngineError, LocalchatError, RequestError
from .backends.devices import memory_in_use
from .backends.residence import DeviceMemory
from .constraints.resample import Resampled, checked
from .events import Failed, PrefillProgress, Stream
from .kv.kv_disk import Hit, KVDiskCache, saved_states
from .sampling import SamplingParams
from .scheduler import Scheduler
from .sequence import KVHandover, Sequence
from .speculation.draft_model import DraftModel
from .speculation.prompt_lookup import PromptLookup
from .speculation.speculative import Drafter, SpecConfig, Speculator
from .step import StepRunner
from .step_clock import StepClock
from .step_costs import StepCosts
from .step_meter import StepMeter
from .templates.chat_template import ChatTemplate
from .text_output import TextOutput
from .workers.disagg import PDSplit
from .workers.target import open_target
from .workers.worker import Worker, WorkerConfig

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Request:
    """A chat (`messages`) or a raw completion (`prompt`), with its sampling parameters."""

    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    id: str | None = None
    speculate: bool = True  # use the engine's drafter, when it has one
    # Text the answer already begins with (a resample keeps what came before the failing value):
    # read with the prompt and fed to the sampler as if generated; the stream carries only what follows.
    forced: str = ""


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
    on_load_progress: Callable[[float], None] | None = None  # the target file's load, 0 to 1 (a switch shows it)
    adapt_threads: bool = True  # follow other programs taking cores (threads.py); False: fixed count
    # Target step cost by width (tokens -> ms) measured earlier on this machine (the wizard's table):
    # the speculator starts from it instead of timing steps at every start. None: measure.
    step_costs: dict[int, float] | None = None
    # Where long prompt prefixes' KV state is saved and restored from (kv_disk.py); None: nowhere.
    kv_disk_dir: Path | None = None
    kv_disk_bytes: int = 4 << 30
    description: str = ""  # what runs where, in words (the planner's; empty: the engine says it plainly)

    @classmethod
    def placed(cls, arrangement: Any, **rest: Any) -> "EngineConfig":
        """The config of a placement's workers (`planning/placements.py: Arrangement`, which names them
        and the step costs measured for them), with the rest of the knobs as given."""
        return cls(worker=arrangement.worker, prefill=arrangement.prefill, draft_worker=arrangement.draft,
                   step_costs=arrangement.step_costs, description=arrangement.description, **rest)


# A saved state is restored only when it spares this many prompt tokens beyond what is resident:
# below that, reading them is about as quick as reading the file.
RESTORE_MIN_GAIN = 256


_ids = itertools.count(1)


class Engine:
    """Continuous batching over one Worker: many sequences, one llama_decode per step."""

    def __init__(self, worker: Worker, config: EngineConfig | None = None, *, drafter: Drafter | None = None,
                 prefill_worker: Worker | None = None, kv_disk: KVDiskCache | None = None) -> None:
        """An engine over loaded workers (`load` opens them from a config): the config is read whole."""
        config = config or EngineConfig()
        self.worker = worker
        self.kv_disk = kv_disk
        self.n_ctx = worker.n_ctx
        self.scheduler = Scheduler(worker.n_ctx, worker.config.n_seq_max, worker.config.n_batch, config.step_budget)
        self.template = ChatTemplate(
            worker.chat_template(), worker.token_text(worker.bos_token) if worker.bos_token >= 0 else "",
            worker.token_text(worker.eos_token) if worker.eos_token >= 0 else "",
        )
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._by_id: dict[str, Sequence] = {}
        self.placement = config.description or ("prefill and decode workers" if prefill_worker else "one worker")
        self.speculator: Speculator | None = None
        if drafter is not None:
            self.speculator = Speculator(drafter, StepCosts(config.step_costs), config.spec)
        self.clock = StepClock()  # the step in progress and what a token costs: a runner's watchdog reads it
        self.meter = StepMeter(worker, self.scheduler.budget, self.speculator.costs if self.speculator else None,
                               config.adapt_threads)
        self.runner = StepRunner(worker, self.scheduler, self.speculator, self.meter, self._by_id, kv_disk,
                                 self.clock)
        self.pd: PDSplit | None = None
        if prefill_worker is not None:
            self.pd = PDSplit(prefill_worker, worker, self._handed_over, config.handover_min_tokens)
        self._thread = threading.Thread(target=self._run, name="localchat-engine", daemon=True)
        self._closed = False
        self._draining = False
        self._drained = threading.Event()
        self._thread.start()

    @classmethod
    def load(cls, model_path: str | Path, config: EngineConfig | None = None) -> "Engine":
        """Load a model file into a worker and start the engine thread."""
        config = config or EngineConfig()
        loaded: list[Worker] = []
        try:
            worker = open_target(model_path, config.worker, config.on_load_progress)
            loaded.append(worker)
            drafter: Drafter | None = PromptLookup() if config.lookup else None
            if config.draft_path is not None:
                loaded.append(Worker(config.draft_path, config.draft_worker or config.worker))
                drafter = DraftModel(loaded[-1], worker)
            prefill = None
            if config.prefill is not None:
                prefill = Worker(model_path, config.prefill)
                loaded.append(prefill)
            saved = saved_states(worker, config.kv_disk_dir, config.kv_disk_bytes)
            return cls(worker, config, drafter=drafter, prefill_worker=prefill, kv_disk=saved)
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

    def submit(self, request: Request) -> Stream | Resampled:
        """Queue a request; its events arrive on the returned stream. Bad requests raise here. A grammar
        with a check (a JSON schema's keywords it cannot express) gets only answers that pass it."""
        return checked(self.submit_unchecked, request)

    def submit_unchecked(self, request: Request, sink: Callable[[Any], None] | None = None) -> Stream:
        """Queue a request whose answer nobody checks here; `sink` takes its events instead of the
        stream (a model runner: its server checks the answers)."""
        if self._closed:
            raise EngineError("the engine is shut down; start a new one.")
        params = request.sampling
        params.validate()
        tokens = self.prompt_tokens(request)
        forced = self.worker.tokenize(request.forced, add_special=False, parse_special=True) if request.forced else []
        tokens += forced
        room = self.n_ctx - len(tokens)
        max_tokens = params.max_tokens if params.max_tokens is not None else room
        max_tokens = max(1, max_tokens - len(forced)) if params.max_tokens is not None else max_tokens
        if room < 1 or max_tokens > room:
            raise ContextOverflowError(
                f"the prompt is {len(tokens)} tokens and max_tokens is {max_tokens}, but the context "
                f"window holds {self.n_ctx}. Shorten the prompt or lower max_tokens"
                + (f", or raise n_ctx (the model was trained for {self.worker.n_ctx_train})."
                   if self.worker.n_ctx_train > self.n_ctx else ".")
            )
        # A chat rendered with the fallback template ends at its markers (the model does not know them).
        stops = self.template.stops if request.messages is not None else ()
        request_id = request.id or f"req-{next(_ids)}"
        stream = Stream(request_id, self.cancel, sink)
        seq = Sequence(id=request_id, tokens=tokens, max_tokens=max_tokens, stream=stream,
                       output=TextOutput(list(dict.fromkeys([*params.stop, *stops]))),
                       ignore_eos=params.ignore_eos,
                       speculate=request.speculate, num_logprobs=params.logprobs, num_forced=len(forced))
        seq.sampler = self.worker.new_sampler(params)
        for token in forced:
            if not seq.sampler.accept_forced(token):
                seq.sampler.close()
                raise RequestError("the text the answer is to begin with does not follow its grammar.")
        self._inbox.put(("submit", seq))
        return stream

    def cancel(self, request_id: str) -> None:
        """Stop a request at the next step boundary; what it read stays for prefix reuse. Unknown ids are ignored."""
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
        if self.speculator is not None:
            self.speculator.drafter.close()
        if self.kv_disk is not None:
            self.kv_disk.close()

    def close_when_done(self) -> threading.Thread:
        """Close once every request submitted so far has ended, from a thread of its own (returned):
        a model switch sends new requests elsewhere and lets the answers in flight here finish."""
        self._inbox.put(("drain", None))
        closer = threading.Thread(target=lambda: (self._drained.wait(), self.close()), name="localchat-retire",
                                  daemon=True)
        closer.start()
        return closer

    @property
    def drafter_name(self) -> str:
        """What drafts for speculation, in words: "off" without speculation."""
        return type(self.speculator.drafter).__name__ if self.speculator is not None else "off"

    def residences(self) -> dict:
        """Where each worker's layers went, by role, as llama.cpp placed them (None: a torch worker)."""
        found = {"model": getattr(self.worker, "residence", None)}
        if self.pd is not None:
            found["prefill"] = getattr(self.pd.prefill.worker, "residence", None)
        draft = getattr(self.speculator.drafter, "worker", None) if self.speculator is not None else None
        if draft is not None:
            found["draft"] = getattr(draft, "residence", None)
        return found

    def devices(self) -> list[DeviceMemory]:
        """The GPUs the workers use, with their memory read now (none on the CPU)."""
        return memory_in_use(self.residences())

    @property
    def steps(self) -> int:
        """Steps run so far (tests and benchmarks read it)."""
        return self.meter.steps

    @property
    def step_log(self) -> list[tuple[float, float, int, int]] | None:
        """(start, seconds, tokens, decode rows) of each step while it is a list; set it to [] to record."""
        return self.meter.step_log

    @step_log.setter
    def step_log(self, log: list[tuple[float, float, int, int]] | None) -> None:
        self.meter.step_log = log

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
            if self._draining and not self._by_id:
                self._drained.set()
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
                self.clock.begin()
                try:
                    self.runner.step()
                except Exception as exc:  # a bug or a llama.cpp failure: fail the work, keep serving
                    log.exception("engine step failed")
                    self._fail_all(exc if isinstance(exc, LocalchatError) else EngineError(f"internal error: {exc!r}"))
                finally:
                    self.clock.end()

    def _take(self, kind: str, item: Any) -> None:
        if kind == "submit":
            self._by_id[item.id] = item
            if self._restore(item):
                return
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
                # What was read (and generated) stays resident: the next turn of a stopped answer,
                # or the same document asked again, starts from it instead of reading it anew.
                self.runner.end(seq, "cancelled", keep_kv=True)
        elif kind == "handover":
            self._receive(*item)
        elif kind == "restored":
            self._restored(*item)
        elif kind == "drain":
            self._draining = True

    def _handed_over(self, request_id: str, handover: KVHandover | None, error: LocalchatError | None) -> None:
        """Called on the prefill thread: the rest happens on this engine's thread."""
        self._inbox.put(("handover", (request_id, handover, error)))

    def _receive(self, request_id: str, handover: KVHandover | None, error: LocalchatError | None) -> None:
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
        if self.kv_disk is not None and self.kv_disk.wants(handover.num_tokens):
            self.kv_disk.save(seq.tokens[:handover.num_tokens], handover.data)
        self.scheduler.add(seq)

    def _restore(self, seq: Sequence) -> bool:
        """Start reading a saved state of the prompt's prefix, when it spares reading enough of it."""
        if self.kv_disk is None:
            return False
        hit = self.kv_disk.lookup(seq.tokens)
        _, resident = self.scheduler.kv.best_prefix(seq.tokens)
        if hit is None or hit.num_tokens - resident < RESTORE_MIN_GAIN:
            return False
        t0 = time.perf_counter()
        self.kv_disk.read_later(hit.entry, lambda data: self._inbox.put(
            ("restored", (seq.id, hit, data, time.perf_counter() - t0))))
        return True

    def _restored(self, request_id: str, hit: Hit, data, seconds: float) -> None:
        """The saved state was read (None: it failed its checks, and the prompt is read instead)."""
        seq = self._by_id.get(request_id)
        if seq is None:
            return  # cancelled meanwhile
        if data is not None:
            seq.kv_import = KVHandover(self.worker.fingerprint, hit.num_tokens, data, export_ms=seconds * 1000,
                                       num_state_tokens=len(hit.entry.tokens))
            seq.transfer_ms, seq.transfer_bytes = seconds * 1000, len(data)
        self.scheduler.add(seq)

    def _fail_all(self, error: LocalchatError) -> None:
        for seq in list(self._by_id.values()):
            if self.pd is not None:
                self.pd.cancel(seq.id)
            self.runner.apply(self.scheduler.finish(seq, keep_kv=False))
            seq.sampler.close()
            seq.stream.put(Failed(error))
        self._by_id.clear()

    def _shutdown(self) -> None:
        self._fail_all(EngineError("the engine was shut down before this request finished."))
