"""Documents for Q&A: extract text with anchors (the kinds it reads: kinds.py), chunk it, and choose what fits
the context."""

from .chunking import Chunk, chunk_document, describe_anchors, estimate_tokens
from .document import (BrokenDocumentError, Document, DocumentError, DocumentTooLargeError, EmptyDocumentError,
                       EncryptedDocumentError, Section, UnsupportedDocumentError)
from .extract import DEFAULT_MAX_BYTES, extract
from .isolate import extract_isolated
from .kinds import KINDS, Kind, detect_kind
from .retrieve import (DocumentPart, Selection, bm25_scores, build_context, build_prompt, document_tokens, marker,
                       select)
from .vectors import Embedder, VectorStore

__all__ = [
    "DEFAULT_MAX_BYTES", "BrokenDocumentError", "Chunk", "Document", "DocumentError", "DocumentPart",
    "DocumentTooLargeError", "Embedder", "EmptyDocumentError", "EncryptedDocumentError", "KINDS", "Kind", "Section",
    "Selection", "UnsupportedDocumentError", "bm25_scores", "build_context", "build_prompt",
    "chunk_document", "describe_anchors", "detect_kind", "document_tokens", "estimate_tokens", "extract", "extract_isolated", "marker",
    "select", "VectorStore",
]
