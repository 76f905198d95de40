"""extract() in a child process with a time and a memory limit.

Parsers of PDF, Word and HTML files are large and their worst cases are not ours to fix: a
hostile file may make one run for minutes or take gigabytes. In a child, that costs the child;
the server, its event loop and the other chats go on, and the user gets an error that says why.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from ..units import size_text
from .document import BrokenDocumentError, Document, DocumentError, DocumentTooLargeError
from .extract import DEFAULT_MAX_BYTES, extract

EXTRACT_SECONDS = 60.0
EXTRACT_MEMORY_BYTES = 2 * 1024**3  # address space of the child, Python and the parsers included


def extract_isolated(path: str | os.PathLike[str], *, name: str | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                     seconds: float = EXTRACT_SECONDS, memory: int = EXTRACT_MEMORY_BYTES) -> Document:
    """extract(path) run in a child process; DocumentError when it fails, runs too long or needs too much."""
    name = name or Path(path).name
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_extract_in_child, args=(sender, str(path), name, max_bytes, memory),
                            name="localchat-extract", daemon=True)
    child.start()
    sender.close()
    try:
        if not receiver.poll(seconds):
            raise DocumentError(f"{name}: reading it took more than {seconds:.0f} s, so it was stopped; "
                                "save it again in its own program (or as PDF) and attach that, or attach a part.")
        outcome, value = receiver.recv()
    except EOFError:  # the child died without a word: killed for memory, or its parser crashed
        raise DocumentTooLargeError(f"{name}: reading it needed more than {size_text(memory)} of memory "
                                    "or crashed the reader; attach a smaller or re-saved copy.") from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receiver.close()
    if outcome == "error":
        raise value
    return value


def _extract_in_child(sender: Connection, path: str, name: str, max_bytes: int, memory: int) -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    except (ImportError, ValueError, OSError):  # Windows, or a lower hard limit: the time limit still holds
        pass
    try:
        result: tuple[str, object] = ("ok", extract(path, name=name, max_bytes=max_bytes))
    except DocumentError as exc:
        result = ("error", exc)
    except MemoryError:
        result = ("error", DocumentTooLargeError(f"{name}: reading it needed more than {size_text(memory)} "
                                                 "of memory; attach a smaller or re-saved copy."))
    except Exception as exc:  # a parser bug on odd input is a broken document to the user
        result = ("error", BrokenDocumentError(f"{name}: could not be read ({type(exc).__name__}); save it "
                                               "again in its own program and attach the new copy."))
    sender.send(result)
    sender.close()


def _context() -> multiprocessing.context.BaseContext:
    # A fork server forks children from a small clean process: no engine threads copied, and far
    # quicker than spawning a new interpreter per file. A frozen bundle has no `python -c` for it.
    if os.name == "posix" and not getattr(sys, "frozen", False):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["localchat.ingest.readers"])
        return context
    return multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
