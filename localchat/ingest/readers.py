"""The readers behind extract(), one per document kind (kinds.py names them): PDF pages, DOCX headings,
and the text formats decoded and cut into sections (text_sections.py).

Every reader takes (name, bytes, max_bytes), returns the sections in reading order and the warnings
for the user (extract() makes the Document), and is bounded: a zip may unpack only to a multiple of its
own size, a PDF is read up to a page and character cap, text is read in linear time.
"""

from __future__ import annotations

import io
import zipfile
from typing import Callable

from ..units import size_text
from .decode import decode_text
from .document import BrokenDocumentError, DocumentTooLargeError, EncryptedDocumentError, Section
from .text_sections import START_ANCHOR, heading_anchor, html_sections, line_sections, markdown_sections

Read = tuple[list[Section], list[str]]  # the sections in reading order, and warnings for the user
Reader = Callable[[str, bytes, int], Read]  # (the file's name, its bytes, the size limit)

# A Word file of text unpacks to 5-20x its size; a zip bomb to thousands of times.
MAX_UNPACK_RATIO, MIN_UNPACK_BYTES, MAX_ZIP_ENTRIES = 40, 16 * 1024 * 1024, 10_000
MAX_PDF_PAGES, MAX_PDF_CHARS = 2_000, 20_000_000


def read_pdf(name: str, data: bytes, max_bytes: int) -> Read:
    """One section per page with text; pages are numbered as a viewer counts them (1-based)."""
    from pypdf import PdfReader
    from pypdf.errors import DependencyError

    fix = "open it in a PDF viewer and save (or print) it as a new PDF, then attach that"
    # pypdf quietly rebuilds a cut-off file and returns only its first pages; a missing
    # end marker is how we notice, so a partial document is never passed off as whole.
    if b"%%EOF" not in data[-1024 * 1024:]:
        raise BrokenDocumentError(f"{name}: the PDF is incomplete (cut off before its end); "
                                  "download or copy it again.")
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            try:
                # Many PDFs are encrypted only against editing and open with an empty password.
                opened = reader.decrypt("")
            except DependencyError:
                raise EncryptedDocumentError(
                    f"{name}: the PDF is encrypted with AES, which needs the 'cryptography' package; "
                    "install it (pip install cryptography) or save an unprotected copy and attach "
                    "that.") from None
            if not opened:
                raise EncryptedDocumentError(
                    f"{name}: the PDF is password-protected; open it with its password in a PDF "
                    "viewer, save a copy without protection, and attach that.")
        pages = list(reader.pages)
    except EncryptedDocumentError:
        raise
    except Exception as exc:  # pypdf raises many types on damaged input
        raise BrokenDocumentError(f"{name}: the PDF is damaged ({_short(exc)}); {fix}.") from None
    sections: list[Section] = []
    warnings: list[str] = []
    failed: list[int] = []
    chars = 0
    for number, page in enumerate(pages, start=1):
        if number > MAX_PDF_PAGES or chars > MAX_PDF_CHARS:
            warnings.append(f"{name}: read the first {number - 1} of its {len(pages)} pages, as much text as "
                            "this app takes from one file; attach the rest as a separate PDF.")
            break
        try:
            text = page.extract_text() or ""
        except Exception:
            failed.append(number)
            continue
        text = "\n".join(line.rstrip() for line in text.splitlines())
        chars += len(text)
        sections.append(Section(text=text, anchor=f"p. {number}"))
    if failed and len(failed) == len(pages):
        raise BrokenDocumentError(f"{name}: no page of the PDF could be read; {fix}.")
    if failed:
        warnings.append(f"{name}: could not read {_pages(failed)}; the rest was read. To include "
                        f"them, {fix}.")
    return sections, warnings


def read_docx(name: str, data: bytes, max_bytes: int) -> Read:
    """One section per heading (Title / Heading N styles), tables as `a | b | c` rows."""
    import docx
    from docx.table import Table

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            entries = zf.infolist()
            # zipfile reads a member only up to its recorded size, so these numbers bound the work.
            unpacked = sum(info.file_size for info in entries)
    except zipfile.BadZipFile:
        raise BrokenDocumentError(f"{name}: the Word file is damaged; open it in Word or "
                                  "LibreOffice, save it again and attach the new copy.") from None
    # A small .docx can unpack to gigabytes (a zip bomb); refuse before parsing.
    allowed = min(4 * max_bytes, max(MIN_UNPACK_BYTES, MAX_UNPACK_RATIO * len(data)))
    if unpacked > allowed or len(entries) > MAX_ZIP_ENTRIES:
        raise DocumentTooLargeError(f"{name}: unpacks to {size_text(unpacked)} in {len(entries):,} parts, "
                                    "far more than a Word file of its size holds; open it in Word, save it "
                                    "again (or split it) and attach that.")
    sections: list[Section] = []
    # Paragraphs are kept apart by a blank line, as the chunker expects of paragraphs.
    anchor, paragraphs = START_ANCHOR, []
    try:
        body = docx.Document(io.BytesIO(data))
        for block in body.iter_inner_content():
            if isinstance(block, Table):
                paragraphs.append("\n".join(_table_rows(block)))
                continue
            text = block.text.strip()
            style = ((block.style.name or "") if block.style is not None else "").lower()
            if text and (style.startswith("heading") or style == "title"):
                sections.append(Section("\n\n".join(p for p in paragraphs if p), anchor))
                anchor, paragraphs = heading_anchor(text), []
            if text:
                paragraphs.append(text)
    except Exception as exc:  # python-docx and lxml raise many types on damaged input
        raise BrokenDocumentError(f"{name}: the Word file is damaged ({_short(exc)}); open it in "
                                  "Word or LibreOffice, save it again and attach the new copy.") from None
    sections.append(Section("\n\n".join(p for p in paragraphs if p), anchor))
    return sections, []


def _table_rows(table) -> list[str]:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            # Merged cells come back once per grid column; keep one copy.
            if not cells or cells[-1] != text:
                cells.append(text)
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _short(exc: Exception) -> str:
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return message if len(message) <= 120 else message[:117] + "..."


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return ("page " if len(numbers) == 1 else "pages ") + shown + (" and more" if len(numbers) > 10 else "")


def text_reader(sections: Callable[[str], list[Section]], html: bool = False) -> Reader:
    """The reader of a text kind: decode the bytes (an HTML file may name its charset), then cut the text."""
    def read(name: str, data: bytes, max_bytes: int) -> Read:
        text, warnings = decode_text(name, data, html=html)
        return sections(text), warnings
    return read


read_html = text_reader(html_sections, html=True)
read_markdown = text_reader(markdown_sections)
read_lines = text_reader(line_sections)  # plain text and source code
