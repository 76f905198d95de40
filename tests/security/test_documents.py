"""Pathological documents cost linear time and bounded memory, and never stall the server."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from localchat.ingest import DocumentError, DocumentTooLargeError, extract
from conftest import best_of


def linear(make, path: Path, small: int) -> tuple[float, float]:
    """(time for `small`, time for 4x `small`) to extract the document make(n) writes."""
    def cost(n: int) -> float:
        path.write_text(make(n))
        return best_of(3, lambda: extract(path))
    return cost(small), cost(4 * small)


@pytest.mark.parametrize("name, make, small", [
    # A heading line whose title ends in a long run of spaces before a last character.
    ("heading.md", lambda n: "# a" + " " * n + "b\n\nbody\n", 4_000),
    # A link-like title that never closes.
    ("links.md", lambda n: "# " + "[" * n + "\n\nbody\n", 4_000),
    # HTML whose text nodes, each a space, join into one long run of spaces without a newline.
    ("spaces.html", lambda n: "<html><body><p>a" + " <i></i>" * n + "b</p></body></html>", 10_000),
])
def test_extraction_is_linear(tmp_path: Path, name: str, make, small: int):
    small_s, large_s = linear(make, tmp_path / name, small)
    assert large_s < 8 * max(small_s, 1e-3), \
        f"4x the input took {large_s / small_s:.1f}x the time ({small_s:.3f} s -> {large_s:.3f} s)"


def docx_bomb(path: Path, unpacked_mb: int) -> Path:
    """A valid-looking Word file whose document part unpacks to `unpacked_mb` MB of repeated XML."""
    body = ("<w:p><w:r><w:t>" + "A" * 1000 + "</w:t></w:r></w:p>") * (unpacked_mb * 1000)
    xml = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.'
           'openxmlformats.org/wordprocessingml/2006/main"><w:body>' + body + "</w:body></w:document>")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        zf.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                    'package/2006/content-types"><Default Extension="xml" ContentType="application/xml"/>'
                    '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
                    'officedocument.wordprocessingml.document.main+xml"/></Types>')
        zf.writestr("_rels/.rels", '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/'
                    'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
                    'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>')
        zf.writestr("word/document.xml", xml)
    path.write_bytes(buffer.getvalue())
    return path


def test_a_docx_bomb_is_refused_before_parsing(tmp_path: Path):
    bomb = docx_bomb(tmp_path / "bomb.docx", 100)
    assert bomb.stat().st_size < 1_000_000  # small on disk, ~100 MB unpacked
    with pytest.raises(DocumentTooLargeError, match="unpacks to"):
        extract(bomb)


def test_extraction_in_a_child_is_stopped_by_its_memory_limit(tmp_path: Path):
    from localchat.ingest import extract_isolated

    big = tmp_path / "big.md"
    big.write_text(("# Section\n\n" + "word " * 2000 + "\n\n") * 2000)  # ~20 MB of text
    with pytest.raises(DocumentError):
        extract_isolated(big, memory=64 * 2**20)  # far too little for this document
    assert "Section" in extract_isolated(big).sections[0].anchor  # with room, it reads


def test_extraction_in_a_child_is_stopped_by_its_time_limit(tmp_path: Path):
    from localchat.ingest import extract_isolated

    doc = tmp_path / "doc.md"
    doc.write_text("# Title\n\n" + "a line of text\n" * 200_000)
    with pytest.raises(DocumentError, match="took more than"):
        extract_isolated(doc, seconds=0.05)
