"""Turn a user's file into a Document: plain text in sections, each with a citable anchor."""

from __future__ import annotations

import io
import logging
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import LocalchatError
from ..units import size_text

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 50 * 10**6  # 50 MB

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"

KINDS = ("pdf", "docx", "html", "markdown", "text", "source")

_EXT_KIND = {
    ".pdf": "pdf",
    ".docx": "docx",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".md": "markdown", ".markdown": "markdown", ".mdown": "markdown", ".mkd": "markdown",
    ".txt": "text", ".text": "text", ".log": "text", ".rst": "text", ".csv": "text",
    ".tsv": "text", ".tex": "text", ".org": "text", ".adoc": "text",
}
_SOURCE_EXTS = frozenset("""
.py .pyi .js .mjs .cjs .ts .tsx .jsx .c .h .cc .cpp .cxx .hpp .hh .java .kt .kts .go .rs .rb
.php .sh .bash .zsh .fish .ps1 .bat .sql .json .jsonl .yaml .yml .toml .ini .cfg .conf .xml
.css .scss .sass .less .swift .scala .lua .r .m .mm .cs .fs .pl .pm .hs .ex .exs .erl .ml
.mli .jl .dart .vue .svelte .zig .nim .v .sv .vhd .cmake .gradle .proto .graphql .tf .nix
.el .clj .lisp .scm .asm .s .f90 .pas .d .groovy .ipynb .diff .patch
""".split())
_SOURCE_NAMES = frozenset({"makefile", "dockerfile", "cmakelists.txt", "justfile", "rakefile",
                           "gemfile", "vagrantfile", "procfile", ".gitignore", ".env.example"})
# Formats people will try that we cannot read: say what to convert them to.
_KNOWN_UNSUPPORTED = {
    ".doc": "save it as .docx or PDF", ".rtf": "save it as .docx or PDF",
    ".odt": "save it as .docx or PDF", ".pages": "export it as PDF",
    ".xls": "export it as CSV", ".xlsx": "export it as CSV", ".ods": "export it as CSV",
    ".ppt": "export it as PDF", ".pptx": "export it as PDF", ".key": "export it as PDF",
    ".epub": "convert it to PDF or HTML", ".zip": "unpack it and attach the files inside",
}


class DocumentError(LocalchatError):
    """A document cannot be read; the message says why and what to do."""


class UnsupportedDocumentError(DocumentError):
    """The file type is unknown, or its content does not match its extension."""


class BrokenDocumentError(DocumentError):
    """The file is damaged or truncated."""


class EncryptedDocumentError(DocumentError):
    """The file is password-protected."""


class EmptyDocumentError(DocumentError):
    """The file holds no text we can extract."""


class DocumentTooLargeError(DocumentError):
    """The file is over the size limit."""


@dataclass(slots=True)
class Section:
    """A stretch of a document's text and where it lives in the original ("p. 3", "§ Intro")."""

    text: str
    anchor: str


@dataclass(slots=True)
class Document:
    """The extracted text of one file, in reading order."""

    name: str
    kind: str
    sections: list[Section]
    warnings: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """All section texts joined, without anchors."""
        return "\n\n".join(s.text for s in self.sections)


def extract(path: str | os.PathLike[str], *, name: str | None = None,
            max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """Read a PDF, DOCX, HTML, Markdown, text or source file into a Document; raise DocumentError."""
    path = Path(path)
    name = name or path.name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DocumentError(f"{name}: file not found; check the path and attach it again.") from None
    except OSError as exc:
        raise DocumentError(f"{name}: cannot be opened ({exc.strerror}); check its permissions.") from None
    if not path.is_file():
        raise DocumentError(f"{name}: is not a regular file; attach a document file.")
    if size <= max_bytes:
        # Read at most one byte past the limit: the file may grow after stat().
        with path.open("rb") as f:
            data = f.read(max_bytes + 1)
        size = len(data)
    if size > max_bytes:
        raise DocumentTooLargeError(
            f"{name}: is {size_text(size)}, over the {size_text(max_bytes)} limit; split it into smaller "
            "files or attach only the part you need.")
    if size == 0:
        raise EmptyDocumentError(f"{name}: the file is empty; attach the file again or pick another.")
    kind = detect_kind(name, data)
    from . import readers, text_sections  # here, not at the top: they import this module's classes

    if kind == "pdf":
        doc = readers.read_pdf(name, data)
    elif kind == "docx":
        doc = readers.read_docx(name, data, max_bytes=max_bytes)
    else:
        text, warnings = decode_text(name, data, html=kind == "html")
        if kind == "html":
            sections = text_sections.html_sections(text)
        elif kind == "markdown":
            sections = text_sections.markdown_sections(text)
        else:
            sections = text_sections.line_sections(text)
        doc = Document(name=name, kind=kind, sections=sections, warnings=warnings)
    doc.sections = [s for s in doc.sections if s.text.strip()]
    if not doc.sections:
        hint = ("it may be scanned images; run it through OCR first" if kind == "pdf"
                else "check that it is the right file")
        raise EmptyDocumentError(f"{name}: has no text to read; {hint}.")
    for warning in doc.warnings:
        log.warning("%s", warning)
    return doc


def detect_kind(name: str, data: bytes) -> str:
    """Decide a file's kind from its extension and check that its bytes agree."""
    ext = Path(name).suffix.lower()
    sniffed = _sniff(data)
    if ext in _KNOWN_UNSUPPORTED:
        raise UnsupportedDocumentError(
            f"{name}: {ext} files are not supported; {_KNOWN_UNSUPPORTED[ext]} and attach that.")
    kind = _EXT_KIND.get(ext)
    if kind is None and (ext in _SOURCE_EXTS or Path(name).name.lower() in _SOURCE_NAMES):
        kind = "source"
    if kind == "pdf" and sniffed != "pdf":
        raise UnsupportedDocumentError(
            f"{name}: is named .pdf but is not a PDF (it looks like {_describe(sniffed)}); "
            "rename it to its real type or export a real PDF.")
    if kind == "docx" and data.startswith(_OLE_MAGIC):
        # Word wraps a password-protected .docx in the old compound format, as .doc files are.
        raise UnsupportedDocumentError(
            f"{name}: is password-protected or an old .doc file renamed; open it in Word or "
            "LibreOffice, remove the password or save it as .docx, and attach that.")
    if kind == "docx" and sniffed != "docx":
        raise UnsupportedDocumentError(
            f"{name}: is named .docx but is not a Word document (it looks like {_describe(sniffed)}); "
            "open it in Word or LibreOffice and save it as .docx.")
    if kind in ("html", "markdown", "text", "source") and sniffed not in ("text", "html"):
        raise UnsupportedDocumentError(
            f"{name}: is named {ext or 'as text'} but holds {_describe(sniffed)}; "
            "rename it to its real type or attach the original file.")
    if kind is None:
        if sniffed in ("binary", "zip"):
            raise UnsupportedDocumentError(
                f"{name}: unknown file type{f' ({ext})' if ext else ''}; attach PDF, DOCX, HTML, "
                "Markdown, text or source files.")
        kind = sniffed  # an unknown extension that is really a PDF, DOCX, HTML or text file
    return kind


def _sniff(data: bytes) -> str:
    """Guess a kind from content alone: pdf, docx, zip, html, text or binary."""
    # The PDF spec tolerates junk before the header; readers look in the first kilobyte.
    if b"%PDF-" in data[:1024]:
        return "pdf"
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                return "docx" if "word/document.xml" in zf.namelist() else "zip"
        except zipfile.BadZipFile:
            return "zip"
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"\xef\xbb\xbf")):
        head = _decode_bom(data[:4096])
    else:
        if b"\x00" in data[:8192]:
            return "binary"
        head = data[:4096].decode("latin-1")
    if head is None:
        return "binary"
    lowered = head.lstrip().lower()
    if lowered.startswith(("<!doctype html", "<html")):
        return "html"
    # Control bytes other than whitespace mean a binary format with no NULs up front.
    controls = sum(1 for ch in head if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    return "binary" if controls > len(head) // 100 + 2 else "text"


def _describe(sniffed: str) -> str:
    return {"pdf": "a PDF", "docx": "a Word document", "zip": "a ZIP archive", "html": "HTML",
            "text": "plain text", "binary": "binary data"}[sniffed]


def _decode_bom(data: bytes) -> str | None:
    for bom, codec in ((b"\xef\xbb\xbf", "utf-8-sig"), (b"\xff\xfe\x00\x00", "utf-32"),
                       (b"\x00\x00\xfe\xff", "utf-32"), (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            # A cut at an arbitrary byte may split a character; ignore only that tail.
            return data.decode(codec, errors="ignore")
    return None


def decode_text(name: str, data: bytes, *, html: bool = False) -> tuple[str, list[str]]:
    """Decode text bytes (BOM, UTF-8, an HTML meta charset, then Latin-1); return text and warnings."""
    warnings: list[str] = []
    text = None
    if data.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        text = _decode_bom(data)
    if text is None:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    if text is None and html:
        text = _decode_meta_charset(data)
    if text is None:
        text = data.decode("latin-1")
        warnings.append(f"{name}: is not UTF-8; read it as Latin-1, so some characters may be wrong. "
                        "Save it as UTF-8 to be sure.")
    return text.replace("\r\n", "\n").replace("\r", "\n"), warnings


def _decode_meta_charset(data: bytes) -> str | None:
    match = re.search(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:4096], re.I)
    if not match:
        return None
    try:
        return data.decode(match.group(1).decode("ascii"))
    except (LookupError, UnicodeDecodeError):
        return None
