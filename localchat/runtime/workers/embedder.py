"""An embedding model in llama.cpp's embedding mode: texts in, one pooled, unit-length vector each.

A BERT-family GGUF (all-MiniLM-L6-v2) says its pooling itself; a model whose file names none (a chat
model asked for embeddings) is mean-pooled. Several texts go into one batch, each its own sequence.
All llama.cpp work of the model runs on one thread of its own: each thread that runs a context gets
an OpenMP team of its own, and a second team spinning beside the engine's slows every step.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import llama_cpp

from ...errors import EngineError, ModelLoadError, RequestError
from .. import llama_log
from ..backends import kernels, offload
from ..worker_types import WorkerConfig
from .worker import check_gguf_file, default_threads, model_meta, tokenize

log = logging.getLogger(__name__)

POOLING_NAMES = {llama_cpp.LLAMA_POOLING_TYPE_MEAN: "mean", llama_cpp.LLAMA_POOLING_TYPE_CLS: "cls",
                 llama_cpp.LLAMA_POOLING_TYPE_LAST: "last"}
MAX_INPUT_TOKENS = 2048  # the longest text, where the model's context is longer (a chat model's)
MAX_SEQS = 32  # texts per batch
T = TypeVar("T")


class Embedder:
    """One GGUF loaded for embeddings; `embed()` is thread-safe (calls queue for the model's thread)."""

    def __init__(self, model_path: str | Path, n_threads: int = 0) -> None:
        self.model_path = Path(model_path)
        check_gguf_file(self.model_path)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localchat-embed")
        self._lock = threading.Lock()
        self._closed = False
        self.model = self.ctx = None
        try:
            # Half the cores: it runs beside the chat model's steps, and two OpenMP teams that each want
            # every core stall each other at every barrier.
            self._call(lambda: self._load(n_threads or max(1, default_threads() // 2)))
        except BaseException:
            self._closed = True
            self._thread.shutdown()
            raise

    def _load(self, n_threads: int) -> None:
        llama_log.install()
        kernels.acquire(False, self.model_path)
        mparams = llama_cpp.llama_model_default_params()
        self._no_devices: list = []
        offload.apply(mparams, WorkerConfig(), [], 0, self._no_devices)  # small models; a GPU is the chat model's
        llama_log.recent_problems.clear()
        model = llama_cpp.llama_model_load_from_file(str(self.model_path).encode(), mparams)
        if not model:
            kernels.release()
            reason = "; ".join(llama_log.recent_problems) or "llama.cpp gave no reason"
            raise ModelLoadError(f"could not load {self.model_path} as an embedding model ({reason}); "
                                 "fetch it again (`localchat pull all-minilm-l6-v2`) or name another GGUF.")
        self.model = model
        self.vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_embd = llama_cpp.llama_model_n_embd_out(model) or llama_cpp.llama_model_n_embd(model)
        self.n_ctx_train = llama_cpp.llama_model_n_ctx_train(model)
        # A text is one sequence, and a non-causal model reads a sequence in one piece: a batch is as long
        # as the longest text the model takes. Short texts share one; attention spans the whole batch,
        # so a longer batch than that costs more than it saves.
        self.max_tokens = min(self.n_ctx_train, MAX_INPUT_TOKENS)
        cparams = llama_cpp.llama_context_default_params()
        cparams.embeddings = True
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = self.max_tokens
        cparams.n_seq_max = MAX_SEQS
        cparams.kv_unified = True
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.no_perf = True
        if model_meta(model, f"{model_meta(model, 'general.architecture')}.pooling_type") is None:
            cparams.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_MEAN
        ctx = llama_cpp.llama_init_from_model(model, cparams)
        if not ctx:
            self._free()
            reason = "; ".join(llama_log.recent_problems) or "out of memory?"
            raise ModelLoadError(f"could not make an embedding context for {self.model_path} ({reason}).")
        self.ctx = ctx
        self._batch = llama_cpp.llama_batch_init(self.max_tokens, 0, 1)
        pooling = llama_cpp.llama_pooling_type(ctx)
        if pooling not in POOLING_NAMES:
            self._free()
            raise ModelLoadError(f"{self.model_path.name} pools its embeddings by llama.cpp's type {pooling} "
                                 "(not mean, cls or last), which gives no one vector per text; use an "
                                 "embedding model such as all-minilm-l6-v2.")
        self.pooling = POOLING_NAMES[pooling]
        self.memory = llama_cpp.llama_get_memory(ctx)  # None for an encoder-only model: no KV cache
        self.encoder_only = not llama_cpp.llama_model_has_decoder(model)
        self.identity = self._identity()

    def _identity(self) -> str:
        """What must agree for stored vectors to be this model's: the weights (size, first MiB, parameter
        count) and the pooling."""
        digest = hashlib.sha256()
        with self.model_path.open("rb") as handle:
            digest.update(handle.read(1 << 20))
        digest.update(f"{self.model_path.stat().st_size}:{llama_cpp.llama_model_n_params(self.model)}:"
                      f"{self.n_embd}:{self.pooling}".encode())
        return f"{self.model_path.stem}-{digest.hexdigest()[:16]}"

    # -- the thread-safe surface ----------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        """The tokens `text` is embedded as (the model's own special tokens around it, none parsed from it)."""
        return tokenize(self.vocab, text, True, False)

    def embed(self, texts: Sequence[str], truncate: bool = True) -> list[list[float]]:
        """One unit-length vector per text; a text past the model's context is cut there (truncate) or refused."""
        return self.embed_tokens([self.tokenize(t) for t in texts], truncate)

    def embed_tokens(self, inputs: Sequence[Sequence[int]], truncate: bool = False) -> list[list[float]]:
        """One unit-length vector per token list (RequestError naming the input that is too long or empty)."""
        n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        rows = []
        for i, tokens in enumerate(inputs):
            if not tokens:
                raise RequestError(f"input {i} is empty; send some text to embed.", "input")
            if len(tokens) > self.max_tokens:
                if not truncate:
                    raise RequestError(f"input {i} is {len(tokens):,} tokens, over this embedding model's "
                                       f"{self.max_tokens:,}; split it into shorter pieces.", "input")
                tokens = [*tokens[: self.max_tokens - 1], tokens[-1]]  # the closing token ([SEP]) stays
            if any(not 0 <= t < n_vocab for t in tokens):
                raise RequestError(f"input {i} holds a token id outside this model's vocabulary of "
                                   f"{n_vocab:,}.", "input")
            rows.append(list(tokens))
        return self._call(lambda: self._embed_rows(rows))

    def embed_inputs(self, items: Sequence[str | Sequence[int]], truncate: bool = False) -> tuple[list[list[float]], int]:
        """Vectors for texts or token lists, and the tokens read (an API request's inputs)."""
        tokens = [self.tokenize(x) if isinstance(x, str) else list(x) for x in items]
        return self.embed_tokens(tokens, truncate), sum(min(len(t), self.max_tokens) for t in tokens)

    def close(self) -> None:
        """Free the model; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._thread.submit(self._free).result()
        self._thread.shutdown()

    # -- on the model's thread ------------------------------------------------------------------

    def _call(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self._closed:
                raise EngineError("the embedding model is closed; load it again.")
            future = self._thread.submit(work)
        return future.result()

    def _embed_rows(self, rows: list[list[int]]) -> list[list[float]]:
        out: list[list[float]] = []
        start = 0
        while start < len(rows):
            end, used = start, 0
            while end < len(rows) and end - start < MAX_SEQS and used + len(rows[end]) <= self.max_tokens:
                used += len(rows[end])
                end += 1
            out += self._decode(rows[start:end])
            start = end
        return out

    def _decode(self, rows: list[list[int]]) -> list[list[float]]:
        batch, n = self._batch, 0
        for seq_id, tokens in enumerate(rows):
            for pos, token in enumerate(tokens):
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, pos, 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = True  # every token's output feeds the pooling
                n += 1
        batch.n_tokens = n
        if self.memory:
            llama_cpp.llama_memory_clear(self.memory, True)
        status = (llama_cpp.llama_encode if self.encoder_only else llama_cpp.llama_decode)(self.ctx, batch)
        if status != 0:
            raise EngineError(f"llama.cpp could not compute embeddings (status {status}).")
        vectors = []
        for seq_id in range(len(rows)):
            pointer = llama_cpp.llama_get_embeddings_seq(self.ctx, seq_id)
            if not pointer:
                raise EngineError("llama.cpp returned no pooled embedding; the model's pooling is unsupported.")
            values = pointer[: self.n_embd]
            norm = math.sqrt(sum(v * v for v in values)) or 1.0
            vectors.append([v / norm for v in values])
        return vectors

    def _free(self) -> None:
        if self.ctx is not None:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model is not None:
            llama_cpp.llama_model_free(self.model)
            self.model = None
            kernels.release()
