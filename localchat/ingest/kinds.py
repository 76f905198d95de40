"""The document kinds: each declared once, with its extensions, how its content is recognised and its
reader. extract() detects and reads by them, the window's uploads accept their extensions and the CLI's
help lists them, so a new kind is one entry here and a reader (readers.py).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .decode import BOMS, decode_bom
from .document import UnsupportedDocumentError
from .readers import Reader, read_docx, read_html, read_lines, read_markdown, read_pdf

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
TEXT_CONTENT = ("text", "html")  # what a text kind's bytes may sniff as (an .md file may hold HTML)


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of document: how it is named, recognised and read."""

    name: str                          # the Document's kind
    label: str                         # how help, errors and the window name it ("PDF")
    looks_like: str                    # how an error names content of this kind ("a PDF")
    extensions: tuple[str, ...]        # lower case, with the dot
    read: Reader
    content: tuple[str, ...] = TEXT_CONTENT  # what its bytes must sniff as (kind names, "zip", "binary")
    # Whole file names that say the kind without an extension (Makefile).
    file_names: tuple[str, ...] = ()
    # Recognises the content from its first bytes whatever the file is called; kinds without one are
    # recognised by extension only (or as plain text, which is the fallback).
    sniff: Callable[[bytes], bool] | None = None
    # Why bytes named as this kind but sniffed as something else are refused, and the fix:
    # {name} the file, {ext} its extension, {looks} what the content looks like.
    mismatch: str = "{name}: is named {ext} but holds {looks}; rename it to its real type or attach the original file."
    # A check before sniffing: the reason to refuse these bytes (after "name: "), or None.
    refuse: Callable[[bytes], str | None] | None = None
    when_empty: str = "check that it is the right file"  # the advice when the reader finds no text


def _text_head(data: bytes) -> str | None:
    """The start of the file as text, for sniffing: None when it holds NUL bytes (and no BOM says UTF-16/32)."""
    if data.startswith(BOMS):
        return decode_bom(data[:4096])
    if b"\x00" in data[:8192]:
        return None
    return data[:4096].decode("latin-1")


def _is_pdf(data: bytes) -> bool:
    # The PDF spec tolerates junk before the header; readers look in the first kilobyte.
    return b"%PDF-" in data[:1024]


def _is_docx(data: bytes) -> bool:
    if data[:4] != b"PK\x03\x04":
        return False
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return "word/document.xml" in zf.namelist()
    except zipfile.BadZipFile:
        return False


def _is_html(data: bytes) -> bool:
    head = _text_head(data)
    return head is not None and head.lstrip().lower().startswith(("<!doctype html", "<html"))


def _ole_wrapped(data: bytes) -> str | None:
    # Word wraps a password-protected .docx in the old compound format, as .doc files are.
    if data.startswith(_OLE_MAGIC):
        return ("is password-protected or an old .doc file renamed; open it in Word or LibreOffice, remove the "
                "password or save it as .docx, and attach that.")
    return None


_SOURCE_EXTENSIONS = tuple("""
.py .pyi .js .mjs .cjs .ts .tsx .jsx .c .h .cc .cpp .cxx .hpp .hh .java .kt .kts .go .rs .rb
.php .sh .bash .zsh .fish .ps1 .bat .sql .json .jsonl .yaml .yml .toml .ini .cfg .conf .xml
.css .scss .sass .less .swift .scala .lua .r .m .mm .cs .fs .pl .pm .hs .ex .exs .erl .ml
.mli .jl .dart .vue .svelte .zig .nim .v .sv .vhd .cmake .gradle .proto .graphql .tf .nix
.el .clj .lisp .scm .asm .s .f90 .pas .d .groovy .ipynb .diff .patch
""".split())

# In the order the help lists them and the sniffers run (a PDF's first kilobyte may hold "<html").
KINDS: tuple[Kind, ...] = (
    Kind("pdf", "PDF", "a PDF", (".pdf",), read_pdf, content=("pdf",), sniff=_is_pdf,
         mismatch="{name}: is named {ext} but is not a PDF (it looks like {looks}); rename it to its real type "
                  "or export a real PDF.", when_empty="it may be scanned images; run it through OCR first"),
    Kind("docx", "DOCX", "a Word document", (".docx",), read_docx, content=("docx",), sniff=_is_docx,
         mismatch="{name}: is named {ext} but is not a Word document (it looks like {looks}); open it in Word "
                  "or LibreOffice and save it as .docx.", refuse=_ole_wrapped),
    Kind("text", "TXT", "plain text",
         (".txt", ".text", ".log", ".rst", ".csv", ".tsv", ".tex", ".org", ".adoc"), read_lines),
    Kind("markdown", "MD", "Markdown", (".md", ".markdown", ".mdown", ".mkd"), read_markdown),
    Kind("html", "HTML", "HTML", (".html", ".htm", ".xhtml"), read_html, sniff=_is_html),
    Kind("source", "source", "source code", _SOURCE_EXTENSIONS, read_lines,
         file_names=("makefile", "dockerfile", "justfile", "rakefile", "gemfile", "vagrantfile", "procfile",
                     ".gitignore", ".env.example")),
)
# What content that is no kind looks like, in an error.
_OTHER_CONTENT = {"zip": "a ZIP archive", "binary": "binary data"}
# Formats people will try that we cannot read: say what to convert them to.
UNSUPPORTED = {
    ".doc": "save it as .docx or PDF", ".rtf": "save it as .docx or PDF",
    ".odt": "save it as .docx or PDF", ".pages": "export it as PDF",
    ".xls": "export it as CSV", ".xlsx": "export it as CSV", ".ods": "export it as CSV",
    ".ppt": "export it as PDF", ".pptx": "export it as PDF", ".key": "export it as PDF",
    ".epub": "convert it to PDF or HTML", ".zip": "unpack it and attach the files inside",
}
_BY_NAME = {kind.name: kind for kind in KINDS}
_BY_EXTENSION = {ext: kind for kind in KINDS for ext in kind.extensions}
_BY_FILE_NAME = {file_name: kind for kind in KINDS for file_name in kind.file_names}


def extensions() -> list[str]:
    """Every extension a kind is read by, for the window's file picker."""
    return list(_BY_EXTENSION)


def listing() -> str:
    """The kinds in words, for help: "PDF, DOCX, TXT, MD, HTML, source"."""
    return ", ".join(kind.label for kind in KINDS)


def sniff(data: bytes) -> str:
    """What the content alone says: a kind's name (by its sniffer; "text" for readable text), "zip" or "binary"."""
    for kind in KINDS:
        if kind.sniff is not None and kind.sniff(data):
            return kind.name
    if data[:4] == b"PK\x03\x04":
        return "zip"
    head = _text_head(data)
    if head is None:
        return "binary"
    # Control bytes other than whitespace mean a binary format with no NULs up front.
    controls = sum(1 for ch in head if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    return "binary" if controls > len(head) // 100 + 2 else "text"


def _looks(sniffed: str) -> str:
    return _BY_NAME[sniffed].looks_like if sniffed in _BY_NAME else _OTHER_CONTENT[sniffed]


def detect_kind(name: str, data: bytes) -> Kind:
    """A file's kind from its extension (or name), checked against its bytes; UnsupportedDocumentError if none."""
    ext = Path(name).suffix.lower()
    if ext in UNSUPPORTED:
        raise UnsupportedDocumentError(f"{name}: {ext} files are not supported; {UNSUPPORTED[ext]} and attach that.")
    kind = _BY_EXTENSION.get(ext) or _BY_FILE_NAME.get(Path(name).name.lower())
    if kind is not None and kind.refuse is not None:
        reason = kind.refuse(data)
        if reason:
            raise UnsupportedDocumentError(f"{name}: {reason}")
    sniffed = sniff(data)
    if kind is None:
        if sniffed not in _BY_NAME:
            kinds = [k.label for k in KINDS]
            raise UnsupportedDocumentError(
                f"{name}: unknown file type{f' ({ext})' if ext else ''}; attach {', '.join(kinds[:-1])} or "
                f"{kinds[-1]} files.")
        return _BY_NAME[sniffed]  # an unknown extension that is really a PDF, DOCX, HTML or text file
    if sniffed not in kind.content:
        raise UnsupportedDocumentError(kind.mismatch.format(name=name, ext=ext or "as text", looks=_looks(sniffed)))
    return kind
