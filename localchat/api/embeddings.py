"""Embeddings (/v1/embeddings, Ollama's /api/embed) on local models: the catalog's embedding model (the
default), another catalog model that is downloaded, or the served chat model, each loaded in llama.cpp's
embedding mode.

Only names are taken, never paths: a client must not make the server open files of its choosing.
Bounded: MAX_INPUTS inputs a request, each within the model's context (a longer one is a 400 that
says so; cut only where the protocol asks for that, as Ollama's does by default), each text at most
MAX_INPUT_CHARS before it is tokenized.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelNotFoundError, RequestError
from ..models.catalog import load_catalog
from ..models.download import cached_file
from ..models.embedding import DEFAULT_EMBEDDING_MODEL, load_embedding_catalog
from ..runners.embedding import shared_models
from .model_calls import off_loop
from .service import Embedded, ModelInfo

MAX_INPUTS = 256
MAX_INPUT_CHARS = 1 << 20  # far past any text a 2k-token context holds; tokenizing more is wasted work


def embedding_names() -> dict[str, Path]:
    """The downloaded catalog embedding models, by every name a client may use (key, file name, file stem)."""
    names: dict[str, Path] = {}
    for key, facts in load_embedding_catalog().items():
        local = cached_file(facts.file)
        if local is not None:
            names |= {key: local, facts.file.file: local, Path(facts.file.file).stem: local}
    return names


def embedding_info(name: str, created: int) -> ModelInfo | None:
    """A downloaded catalog embedding model, by its catalog name; None if there is none of that name."""
    facts = load_embedding_catalog().get(name)
    path = cached_file(facts.file) if facts is not None else None
    if facts is None or path is None:
        return None
    return ModelInfo(name, created, kind="embedding", path=path, n_ctx=facts.n_ctx_train, n_embd=facts.n_embd,
                     loaded=shared_models().is_loaded(path))


def model_file(name: str | None, served: set[str], served_path: Path | None) -> tuple[str, Path]:
    """The name to answer with and the GGUF file a request's `model` names."""
    name = name or DEFAULT_EMBEDDING_MODEL
    local = embedding_names()
    if name in local:
        return name, local[name]
    if name in served:
        if served_path is None or not served_path.is_file() or served_path.suffix.lower() != ".gguf":
            raise RequestError(f"the served model '{name}' is not a GGUF file, so llama.cpp cannot embed with "
                               f"it; use '{DEFAULT_EMBEDDING_MODEL}'.", "model")
        return name, served_path
    key, _, quant = name.partition(":")
    catalog = load_catalog()
    if key in catalog:
        file = catalog[key].file_for(quant or None)
        path = cached_file(file) if not file.is_checkpoint else None
        if path is not None:
            return name, path
        raise ModelNotFoundError(f"the model '{name}' is not downloaded; run `localchat pull {name}` on the server.")
    if name in load_embedding_catalog():
        raise ModelNotFoundError(f"the embedding model '{name}' is not downloaded; run `localchat pull {name}` on "
                                 "the server.")
    raise ModelNotFoundError(f"there is no model '{name}' here to embed with; use '{DEFAULT_EMBEDDING_MODEL}', "
                             "a catalog model that is downloaded, or the served model.")


def check_inputs(raw: Any) -> list[str] | list[list[int]]:
    """A request's input (a text, texts, a token array or token arrays) as a list, within the bounds."""
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif raw and all(isinstance(x, int) for x in raw):
        items = [list(raw)]  # one token array
    else:
        items = list(raw)
    if not items:
        raise RequestError("input is empty; send a string, a list of strings or a list of token arrays.", "input")
    if len(items) > MAX_INPUTS:
        raise RequestError(f"input holds {len(items):,} items; send at most {MAX_INPUTS} per request.", "input")
    for i, item in enumerate(items):
        if not item:
            raise RequestError(f"input {i} is empty; send some text (or tokens) to embed.", "input")
        if isinstance(item, str) and len(item) > MAX_INPUT_CHARS:
            raise RequestError(f"input {i} is {len(item):,} characters, far more than the model reads at once; "
                               "split it into shorter pieces.", "input")
    return items


async def embed(items: list[str] | list[list[int]], model: str | None, served: set[str], served_path: Path | None,
                dimensions: int | None = None, truncate: bool = False) -> Embedded:
    """Vectors for checked inputs (check_inputs) from the model `model` names; `truncate`: a text past the
    model's context is cut there (Ollama's default) instead of refused."""
    name, path = model_file(model, served, served_path)
    # Loading (once) and the model's own thread run off the event loop.
    embedder = await off_loop(shared_models().open, path)
    if dimensions is not None and dimensions != embedder.n_embd:
        raise RequestError(f"dimensions={dimensions} is not offered: {name} makes {embedder.n_embd}-dimensional "
                           f"vectors; send dimensions={embedder.n_embd} or leave it out.", "dimensions")
    vectors, n_tokens = await off_loop(embedder.embed_inputs, items, truncate)
    return Embedded(name, vectors, n_tokens)
