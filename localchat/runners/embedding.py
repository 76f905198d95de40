"""The embedding models in runner processes of their own, beside the chat model's, and the process's
one set of loaded ones (documents' retrieval and /v1/embeddings share them).

A document's chunks and the API's /v1/embeddings go through llama.cpp as the chat model's prompts
do, and a crafted embedding GGUF can abort it as a chat model's can: in a runner that costs the one
call in flight. The runner answers one call at a time (the model runs on one thread anyway); a call
whose runner died is tried once more on a new one (an embedding is the same on any), and fails if
that one dies too.

The protocol, one pickled tuple per message: in (method, args) or ("close",); out ("ready", facts) or
("load_failed", error) once, then ("reply", value, error) per call, and ("alive",) every second from
the start. Supervised as the chat model's runner is (liveness.py): a runner silent past the bound is
frozen, ended, and counts as one that died; one ended from outside (SIGKILL, SIGTERM) while loading
does not mark its file bad.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from ..errors import EngineError, LocalchatError, ModelLoadError
from ..models.embedding import DEFAULT_EMBEDDING_MODEL, local_embedding_model
from .liveness import SILENCE_S, START_S, Outbox, Receiver, Silent
from .runner_process import LoadCrashError, ended, killed_from_outside

log = logging.getLogger(__name__)

CALLS = ("tokenize", "embed", "embed_tokens", "embed_inputs")
FACTS = ("identity", "n_embd", "max_tokens", "pooling")  # read once, when the runner is ready
MAX_LOADED = 2  # embedding models kept loaded at once: the catalog's and one other (the served model, say)


def _serve(conn: Any, path: Path, n_threads: int) -> None:
    """The runner's main: load the model, then answer calls until told to close or the server goes away."""
    outbox = Outbox(conn)
    outbox.beat()  # from the start: importing and loading take a while, and a frozen runner must be seen
    from ..runtime.workers.embedder import Embedder

    try:
        embedder = Embedder(path, n_threads)
    except LocalchatError as exc:
        outbox.send(("load_failed", exc))
        os._exit(0)
    outbox.send(("ready", {name: getattr(embedder, name) for name in FACTS}))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):  # the server is gone
            os._exit(0)
        if message[0] == "close":
            embedder.close()
            os._exit(0)
        method, args = message
        try:
            if method not in CALLS:
                raise EngineError(f"the embedding runner has no call {method!r}.")
            outbox.send(("reply", getattr(embedder, method)(*args), None))
        except LocalchatError as exc:
            outbox.send(("reply", None, exc))
        except Exception as exc:  # a bug: that call fails, the runner keeps serving
            log.exception("the embedding runner failed a call")
            outbox.send(("reply", None, EngineError(f"internal error in the embedding runner: {exc!r}")))


class SupervisedEmbedder:
    """runtime.embedder.Embedder's surface over a runner process; thread-safe (calls take turns)."""

    def __init__(self, model_path: str | Path, n_threads: int = 0, silence_s: float = SILENCE_S) -> None:
        self.model_path = Path(model_path)
        self._threads, self._silence = n_threads, silence_s
        self._lock = threading.Lock()
        self._closed = False
        self._process: Any = None
        self._conn: Any = None
        self.restarts = 0  # runners started after the first
        self._start()

    def tokenize(self, text: str) -> list[int]:
        return self._call("tokenize", text)

    def embed(self, texts: Sequence[str], truncate: bool = True) -> list[list[float]]:
        return self._call("embed", list(texts), truncate)

    def embed_tokens(self, inputs: Sequence[Sequence[int]], truncate: bool = False) -> list[list[float]]:
        return self._call("embed_tokens", [list(t) for t in inputs], truncate)

    def embed_inputs(self, items: Sequence[str | Sequence[int]], truncate: bool = False) -> tuple[list[list[float]], int]:
        return self._call("embed_inputs", list(items), truncate)

    @property
    def pid(self) -> int:
        return self._process.pid

    def close(self) -> None:
        """End the runner; safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._process is not None:
                try:
                    self._conn.send(("close",))
                except (OSError, ValueError):
                    pass
                self._stop()

    # -- the runner process ---------------------------------------------------------------

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            for attempt in (1, 2):
                if self._closed:
                    raise EngineError("the embedding model is closed; load it again.")
                if self._process is None:  # the last one died: this call starts the next
                    self.restarts += 1
                    self._start()
                try:
                    # The lock is held across the pipe by design (one call at a time), and bounded: a
                    # runner that falls silent is ended, which ends this wait.
                    self._conn.send((method, args))
                    _, value, error = self._reply()
                    break
                except (EOFError, OSError):
                    # Embedding is the same on any runner: a runner that died (killed while idle, say)
                    # costs one retry. The input is to blame when the retry's runner dies as well.
                    how = self._stop()
                    log.warning("the embedding model's runner %s; starting another", how)
                    if attempt == 2:
                        raise EngineError(f"the embedding model's runner {how} twice while embedding this input; "
                                          "send other text, or another embedding model.") from None
        if error is not None:
            raise error
        return value

    def _reply(self) -> tuple:
        """The runner's next reply; EOFError (the runner ended, by the server if it fell silent) otherwise."""
        while True:
            try:
                message = self._receiver.receive()
            except Silent as silent:
                log.error("the embedding model's runner stopped answering (%s); ending it", silent)
                self._process.kill()
                raise EOFError from None
            if message[0] == "reply":
                return message

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")  # never fork: the server runs threads
        ours, theirs = context.Pipe()
        process = context.Process(target=_serve, args=(theirs, self.model_path, self._threads),
                                  name="localchat-embedding-runner", daemon=True)
        process.start()
        theirs.close()
        self._process, self._conn = process, ours
        self._receiver = Receiver(ours, self._silence, process.kill)
        try:
            within = START_S
            while (message := self._receiver.receive(within))[0] == "alive":
                within = self._silence
            kind, value = message
        except Silent as silent:
            process.kill()
            self._stop()
            raise ModelLoadError(f"the embedding model's runner stopped answering while loading "
                                 f"{self.model_path.name} ({silent}); it was ended. Try again.") from None
        except (EOFError, OSError):
            how = self._stop()
            # A signal: llama.cpp aborted on the file; a kill from outside says nothing of the file.
            if how.startswith("crashed") and not killed_from_outside(process.exitcode):
                raise LoadCrashError(f"the embedding model's runner {how} while loading {self.model_path.name}: "
                                     "llama.cpp could not read this file. Fetch it again or name another GGUF.",
                                     how) from None
            raise ModelLoadError(f"the embedding model's runner {how} before {self.model_path.name} was loaded; "
                                 "the log says why.") from None
        if kind == "load_failed":
            self._stop()
            raise value
        for name, fact in value.items():
            setattr(self, name, fact)

    def _stop(self) -> str:
        """Wait for the runner to end (killed if it does not) and say how it ended."""
        process, self._process = self._process, None
        self._receiver.close()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()
        self._conn.close()
        return ended(process.exitcode)


class EmbeddingModels:
    """Embedding models loaded on first use, by file, the least recently used closed past MAX_LOADED."""

    def __init__(self) -> None:
        self._loaded: dict[Path, SupervisedEmbedder] = {}
        self._lock = threading.Lock()
        self._said_missing = False

    def open(self, path: Path) -> SupervisedEmbedder:
        """The loaded embedder of a GGUF file (loaded now, in a runner, if it is not)."""
        path = path.resolve()
        with self._lock:
            embedder = self._loaded.pop(path, None)
            if embedder is None:
                embedder = SupervisedEmbedder(path)
            self._loaded[path] = embedder  # the newest last
            while len(self._loaded) > MAX_LOADED:
                self._loaded.pop(next(iter(self._loaded))).close()
            return embedder

    def is_loaded(self, path: Path) -> bool:
        with self._lock:
            return path.resolve() in self._loaded

    def default(self) -> SupervisedEmbedder | None:
        """The catalog's embedding model, or None (said once in the log) while it is not fetched."""
        path = local_embedding_model()
        if path is None:
            if not self._said_missing:
                self._said_missing = True
                log.warning("no embedding model here: documents are searched by their words alone (BM25); "
                            "`localchat pull %s` adds search by meaning.", DEFAULT_EMBEDDING_MODEL)
            return None
        return self.open(path)

    def close(self) -> None:
        with self._lock:
            for embedder in self._loaded.values():
                embedder.close()
            self._loaded.clear()


_shared: EmbeddingModels | None = None
_shared_lock = threading.Lock()


def shared_models() -> EmbeddingModels:
    """The process's one set of loaded embedding models."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = EmbeddingModels()
        return _shared
