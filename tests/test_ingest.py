"""The document pipeline on real files made here: PDF (hand-written), DOCX (python-docx), HTML, text."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest

from localchat.errors import LocalchatError
from localchat.ingest import (
    BrokenDocumentError,
    DocumentError,
    DocumentTooLargeError,
    EmptyDocumentError,
    EncryptedDocumentError,
    UnsupportedDocumentError,
    build_prompt,
    chunk_document,
    estimate_tokens,
    extract,
    select,
)

FACT = "The vault access code is 4711-BLUE."
_FILLER = ("river market garden window morning paper station harbor pencil forest engine ladder "
           "meadow candle bridge orchard signal lantern valley copper thunder marble canyon "
           "saddle violin quarry glacier tunnel beacon anchor falcon compass").split()


def make_pdf(pages: list[list[str]]) -> bytes:
    """A valid PDF with one Helvetica text line per string, pages in order."""
    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>"
           % (b" ".join(b"%d 0 R" % p for p in page_ids), len(pages)),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    }
    for pid, lines in zip(page_ids, pages):
        escaped = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in lines]
        stream = ("BT /F1 11 Tf 14 TL 72 760 Td " + " ".join(f"({ln}) Tj T*" for ln in escaped)
                  + " ET").encode("latin-1")
        objects[pid] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                        b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (pid + 1))
        objects[pid + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    out = bytearray(b"%PDF-1.4\n")
    offsets = {}
    for num in sorted(objects):
        offsets[num] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (num, objects[num])
    xref, size = len(out), max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def filler_pages(num_pages: int, seed: int = 7) -> list[list[str]]:
    rng = random.Random(seed)
    pages = []
    for p in range(num_pages):
        lines = []
        for _ in range(30):
            words = [rng.choice(_FILLER) for _ in range(12)]
            lines.append(" ".join(words).capitalize() + ".")
        pages.append(lines)
    return pages


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def test_pdf_pages_become_anchors(tmp_path: Path) -> None:
    pdf = write(tmp_path, "small.pdf", make_pdf([["Alpha page one."], ["Bravo page two."],
                                                 ["Charlie page three."]]))
    doc = extract(pdf)
    assert doc.kind == "pdf" and doc.name == "small.pdf"
    assert [s.anchor for s in doc.sections] == ["p. 1", "p. 2", "p. 3"]
    assert "Bravo" in doc.sections[1].text and "Bravo" not in doc.sections[0].text


def test_planted_fact_is_retrieved_with_its_page(tmp_path: Path) -> None:
    pages = filler_pages(30)
    pages[16][12] = FACT  # page 17
    pages[2][5] = "The vault is in the basement."  # a weaker match, earlier in the document
    doc = extract(write(tmp_path, "long.pdf", make_pdf(pages)))
    assert len(doc.sections) == 30
    sel = select("What is the vault access code?", [doc], budget_tokens=400)
    assert sel.mode == "retrieved"
    chosen = sel.parts[0].chunks
    assert chosen and sel.num_tokens <= 400
    hits = [c for c in chosen if "4711-BLUE" in c.text]
    assert len(hits) == 1 and hits[0].anchors == ["p. 17"]
    assert sel.summary() == f"long.pdf: p. 3, p. 17 (2 of {sel.parts[0].num_chunks} chunks)"
    assert [c.index for c in chosen] == sorted(c.index for c in chosen)  # reading order
    prompt = build_prompt("What is the vault access code?", sel)
    assert "[long.pdf p. 17]\n" in prompt
    assert (prompt.index("basement") < prompt.index("[long.pdf p. 17]") < prompt.index("4711-BLUE")
            < prompt.index("Question:"))
    assert sel.to_dict()["documents"][0]["chunks"][0]["anchors"]


def _words(text: str) -> int:
    return len(text.split())


@pytest.mark.parametrize("count", [estimate_tokens, _words])
@pytest.mark.parametrize("budget", [120, 250, 400, 900, 3000])
def test_prompt_never_exceeds_budget(tmp_path: Path, budget: int, count) -> None:
    docs = [extract(write(tmp_path, "a.pdf", make_pdf(filler_pages(4)))),
            extract(write(tmp_path, "b.txt", "\n".join(f"Line {i} of the notes." for i in range(200))))]
    question = "Which lines mention the copper lantern?"
    sel = select(question, docs, budget_tokens=budget, count_tokens=count)
    assert count(build_prompt(question, sel)) <= budget
    included = sum(len(p.chunks) for p in sel.parts) if sel.mode == "retrieved" else len(docs)
    assert included > 0


def test_whole_documents_when_they_fit(tmp_path: Path) -> None:
    a = extract(write(tmp_path, "a.pdf", make_pdf([["Alpha one."], ["Alpha two."]])))
    b = extract(write(tmp_path, "b.md", "# Notes\nBravo notes.\n"))
    sel = select("anything?", [a, b], budget_tokens=4000)
    assert sel.mode == "whole"
    assert sel.summary().startswith("a.pdf whole (") and "b.md whole (" in sel.summary()
    prompt = build_prompt("anything?", sel)
    assert prompt.index("[a.pdf p. 2]\nAlpha two.") < prompt.index("[b.md § Notes]") < prompt.index("Question:")
    # The same documents with a budget they cannot fit no longer go whole.
    assert select("anything?", [a, b], budget_tokens=40).mode == "retrieved"
    starved = select("anything?", [a, b], budget_tokens=20)
    assert starved.mode == "retrieved" and "no room" in starved.summary()


def test_docx_headings_and_tables(tmp_path: Path) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Introduction", level=1)
    d.add_paragraph("This study looks at copper prices.")
    d.add_heading("Results", level=2)
    d.add_paragraph("Prices rose by nine percent.")
    table = d.add_table(rows=2, cols=2)
    for r, (k, v) in enumerate([("Metric", "Value"), ("Growth", "9%")]):
        table.cell(r, 0).text, table.cell(r, 1).text = k, v
    path = tmp_path / "study.docx"
    d.save(str(path))
    doc = extract(path)
    assert doc.kind == "docx"
    assert [s.anchor for s in doc.sections] == ["§ Introduction", "§ Results"]
    assert "nine percent" in doc.sections[1].text and "Growth | 9%" in doc.sections[1].text
    assert "nine percent" not in doc.sections[0].text


def test_broken_pdf(tmp_path: Path) -> None:
    data = make_pdf(filler_pages(3))
    with pytest.raises(BrokenDocumentError, match="incomplete"):
        extract(write(tmp_path, "cut.pdf", data[: len(data) * 2 // 3]))
    garbage = b"%PDF-1.4\n" + bytes(random.Random(1).randrange(256) for _ in range(3000)) + b"\n%%EOF\n"
    with pytest.raises(BrokenDocumentError, match="damaged"):
        extract(write(tmp_path, "garbage.pdf", garbage))


def test_broken_docx(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "broken.docx"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("word/document.xml", "<w:document><unclosed")
    with pytest.raises(BrokenDocumentError, match="damaged.*save it again"):
        extract(path)


def test_pdf_that_is_text(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedDocumentError, match="not a PDF") as err:
        extract(write(tmp_path, "fake.pdf", "Just some notes, not a PDF at all.\n"))
    assert isinstance(err.value, DocumentError) and isinstance(err.value, LocalchatError)
    assert "plain text" in str(err.value)


def test_encrypted_pdf(tmp_path: Path) -> None:
    from pypdf import PdfWriter

    def encrypted(user: str, owner: str) -> bytes:
        writer = PdfWriter(clone_from=io.BytesIO(make_pdf([["Secret page."]])))
        writer.encrypt(user, owner, algorithm="RC4-128")
        out = io.BytesIO()
        writer.write(out)
        return out.getvalue()

    with pytest.raises(EncryptedDocumentError, match="password"):
        extract(write(tmp_path, "locked.pdf", encrypted("secret", "owner")))
    # Protection against editing only: readable with the empty user password.
    doc = extract(write(tmp_path, "owner-only.pdf", encrypted("", "owner")))
    assert "Secret page." in doc.text


def test_aes_encrypted_pdf(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    from pypdf import PdfWriter

    for user, name in (("secret", "aes-locked.pdf"), ("", "aes-owner-only.pdf")):
        writer = PdfWriter(clone_from=io.BytesIO(make_pdf([["Secret page."]])))
        writer.encrypt(user, "owner", algorithm="AES-256")
        out = io.BytesIO()
        writer.write(out)
        write(tmp_path, name, out.getvalue())
    with pytest.raises(EncryptedDocumentError, match="password"):
        extract(tmp_path / "aes-locked.pdf")
    assert "Secret page." in extract(tmp_path / "aes-owner-only.pdf").text


def test_empty_and_oversize(tmp_path: Path) -> None:
    with pytest.raises(EmptyDocumentError, match="empty"):
        extract(write(tmp_path, "empty.txt", b""))
    with pytest.raises(EmptyDocumentError, match="no text"):
        extract(write(tmp_path, "blank.pdf", make_pdf([[], []])))
    big = write(tmp_path, "big.txt", "word " * 1000)
    with pytest.raises(DocumentTooLargeError, match="limit") as err:
        extract(big, max_bytes=1000)
    assert "5.0 kB, over the 1.0 kB limit" in str(err.value)  # decimal units, as everywhere (units.py)
    assert extract(big).sections  # the same file under the default limit is fine


def test_html_drops_scripts_and_styles(tmp_path: Path) -> None:
    page = """<!DOCTYPE html><html><head><title>T</title><style>body { color: red }</style>
    <script>var leaked = "SCRIPTTEXT";</script></head><body><h1>Intro</h1>
    <p>Hello &amp; welcome</p><script type="module">alert("boom")</script>
    <noscript>enable js</noscript><h2>Details</h2><ul><li>one</li><li>two</li></ul>
    <pre>def f():
    return 1</pre></body></html>"""
    doc = extract(write(tmp_path, "page.html", page))
    text = doc.text
    for hidden in ("SCRIPTTEXT", "alert", "color", "enable js"):
        assert hidden not in text
    assert "Hello & welcome" in text and "- two" in text and "def f():\n    return 1" in text
    assert [s.anchor for s in doc.sections][-2:] == ["§ Intro", "§ Details"]


def test_text_encodings(tmp_path: Path) -> None:
    content = "Grüße, 世界\nsecond line\n"
    doc = extract(write(tmp_path, "u16.txt", content.encode("utf-16")))
    assert doc.text == content.strip("\n") and not doc.warnings
    doc = extract(write(tmp_path, "bom.txt", content.encode("utf-8-sig")))
    assert doc.text.startswith("Grüße") and not doc.warnings
    doc = extract(write(tmp_path, "latin.txt", "café crème\n".encode("latin-1")))
    assert doc.text == "café crème" and "Latin-1" in doc.warnings[0]


def test_type_sniffing(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedDocumentError, match="Word"):
        extract(write(tmp_path, "fake.docx", "not a zip"))
    with pytest.raises(UnsupportedDocumentError):
        extract(write(tmp_path, "notes.txt", make_pdf([["x"]])))
    with pytest.raises(UnsupportedDocumentError, match="password-protected"):
        extract(write(tmp_path, "locked.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 100))
    with pytest.raises(UnsupportedDocumentError, match="not supported"):
        extract(write(tmp_path, "old.doc", b"\xd0\xcf\x11\xe0" + b"\x00" * 100))
    with pytest.raises(UnsupportedDocumentError, match="unknown file type"):
        extract(write(tmp_path, "blob.bin", bytes(range(256))))
    assert extract(write(tmp_path, "mystery.dat", make_pdf([["Sniffed."]]))).kind == "pdf"
    assert extract(write(tmp_path, "README", "plain words\n")).kind == "text"



def test_each_kind_is_read_by_its_names_and_the_window_and_the_help_offer_it(tmp_path: Path, capsys) -> None:
    import docx

    from localchat.cli import build_parser
    from localchat.ingest import KINDS
    from localchat.ui.documents.uploads import ACCEPTED

    word = docx.Document()
    word.add_paragraph("Kind check.")
    buffer = io.BytesIO()
    word.save(buffer)
    samples = {"pdf": make_pdf([["Kind check."]]), "docx": buffer.getvalue()}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["chat", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for kind in KINDS:
        for name in [f"sample{ext}" for ext in kind.extensions] + list(kind.file_names):
            doc = extract(write(tmp_path, name, samples.get(kind.name, "Kind check.\n\nmore words\n")))
            assert (doc.kind, doc.text.split()[:2]) == (kind.name, ["Kind", "check."]), name
        assert set(kind.extensions) <= set(ACCEPTED), kind.name
        assert kind.label in help_text, kind.name

def test_markdown_and_source_anchors(tmp_path: Path) -> None:
    md = "Intro line.\n\n# First\nText one.\n```\n# not a heading\n```\nSecond\n------\nText two.\n"
    doc = extract(write(tmp_path, "notes.md", md))
    assert [s.anchor for s in doc.sections] == ["beginning", "§ First", "§ Second"]
    assert "# not a heading" in doc.sections[1].text
    source = "\n".join(f"def f{i}():\n    return {i}\n" for i in range(100))
    doc = extract(write(tmp_path, "mod.py", source))
    assert doc.kind == "source" and doc.sections[0].anchor.startswith("lines 1–")
    last = doc.sections[-1].anchor
    assert last.endswith(f"–{len(source.splitlines())}")  # the final blank line is not cited


def test_a_chunk_of_a_text_file_cites_its_own_lines(tmp_path: Path) -> None:
    text = "\n".join(f"Day {i}: the keeper logged calm weather." for i in range(1, 301))
    doc = extract(write(tmp_path, "log.txt", text))
    assert len(doc.sections[0].text.splitlines()) > 40  # a section spans many lines...
    chunks = chunk_document(doc, target_tokens=60, count_tokens=_words)
    for chunk in chunks:  # ...and a chunk names exactly the lines it holds
        (anchor,) = chunk.anchors
        lines = text.splitlines()
        first, last = (int(n) for n in anchor.removeprefix("lines ").split("–"))
        assert chunk.text.split() == " ".join(lines[first - 1:last]).split(), anchor  # prose joins lines by spaces
    assert chunks[-1].anchors[0].endswith("–300")


def test_chunks_keep_all_text_in_order_and_size(tmp_path: Path) -> None:
    doc = extract(write(tmp_path, "long.pdf", make_pdf(filler_pages(5))))
    chunks = chunk_document(doc, target_tokens=60, count_tokens=_words)
    assert len(chunks) > 5
    assert all(c.num_tokens <= 60 for c in chunks)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert " ".join(c.text for c in chunks).split() == doc.text.split()
    assert {a for c in chunks for a in c.anchors} == {f"p. {n}" for n in range(1, 6)}


def test_summary_merges_and_caps_anchors() -> None:
    from localchat.ingest import describe_anchors

    assert describe_anchors(["p. 3", "p. 4", "p. 5", "p. 9"]) == "pp. 3–5, p. 9"
    assert describe_anchors(["lines 1–40", "lines 41–80", "lines 100–120"]) == "lines 1–80, lines 100–120"
    assert describe_anchors(["§ A", "§ B", "§ A"]) == "§ A, § B"
    assert describe_anchors([f"p. {n}" for n in range(1, 40, 2)], limit=3) == "p. 1, p. 3, p. 5, and 17 more"


def test_embedder_fuses_with_bm25(tmp_path: Path) -> None:
    paragraphs = [" ".join(random.Random(i).choices([w for w in _FILLER if w != "lantern"], k=20)) + "." for i in range(12)]
    paragraphs[9] = "The lantern " + paragraphs[9]
    paragraphs[6] = "The automobile was parked outside the old mill."
    doc = extract(write(tmp_path, "story.txt", "\n\n".join(paragraphs)))

    class SynonymEmbedder:
        def embed(self, texts):
            return [[1.0 if ("car" in t.split() or "automobile" in t) else 0.0, 0.1] for t in texts]

    def chosen(sel):
        return " ".join(c.text for c in sel.parts[0].chunks)

    kwargs = dict(budget_tokens=200, chunk_tokens=40)
    plain = chosen(select("Which car has the lantern?", [doc], **kwargs))
    assert "lantern" in plain and "automobile" not in plain
    fused = chosen(select("Which car has the lantern?", [doc], embedder=SynonymEmbedder(), **kwargs))
    assert "lantern" in fused and "automobile" in fused
