"""POST /v1/embeddings on local models: the catalog's embedding model (the default), another catalog model
that is downloaded, or the served chat model, each loaded in llama.cpp's embedding mode.

Only names are taken, never paths: a client must not make the server open files of its choosing.
Bounded: MAX_INPUTS inputs a request, each within the model's context (a longer one is a 400 that
says so, never cut), each text at most MAX_INPUT_CHARS before it is tokenized.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import numpy as np
from starlette.responses import JSONResponse, Response

from ..errors import ModelNotFoundError, RequestError
from ..models.catalog import load_catalog
from ..models.download import cached_file
from ..models.embedding import DEFAULT_EMBEDDING_MODEL, load_embedding_catalog, shared_models
from ..runtime.embedder import Embedder
from .schemas import EmbeddingsBody, parse

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


def embedding_card(name: str, created: int) -> dict[str, Any] | None:
    """The /v1/models/{name} answer for a downloaded catalog embedding model, or None."""
    facts = load_embedding_catalog().get(name)
    if facts is None or cached_file(facts.file) is None:
        return None
    return {"id": name, "object": "model", "created": created, "owned_by": "localchat",
            "x_localchat": {"kind": "embedding", "n_embd": facts.n_embd, "n_ctx": facts.n_ctx_train}}


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


def _inputs(body: EmbeddingsBody) -> list[str] | list[list[int]]:
    raw = body.input
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


def _embed(embedder: Embedder, items: list[str] | list[list[int]]) -> tuple[list[list[float]], int]:
    tokens = [embedder.tokenize(x) if isinstance(x, str) else x for x in items]
    return embedder.embed_tokens(tokens), sum(len(t) for t in tokens)


async def embeddings_response(data: Any, served: set[str], served_path: Path | None) -> Response:
    """The OpenAI embeddings response for a decoded request body."""
    body = parse(EmbeddingsBody, data)
    items = _inputs(body)
    name, path = model_file(body.model, served, served_path)
    # Loading (once) and the model's own thread run off the event loop.
    embedder = await asyncio.to_thread(shared_models().open, path)
    if body.dimensions is not None and body.dimensions != embedder.n_embd:
        raise RequestError(f"dimensions={body.dimensions} is not offered: {name} makes {embedder.n_embd}-dimensional "
                           f"vectors; send dimensions={embedder.n_embd} or leave it out.", "dimensions")
    vectors, n_tokens = await asyncio.to_thread(_embed, embedder, items)
    base64_out = body.encoding_format == "base64"
    data_out = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii") if base64_out
                 else v} for i, v in enumerate(vectors)]
    return JSONResponse({"object": "list", "data": data_out, "model": name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})
