"""Text formats cut into sections for their readers (readers.py): Markdown and HTML by heading, plain text
and source by lines.

Every reader is linear in its input (no backtracking regexes on document text); each section's
anchor names where it starts.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from .document import Section

START_ANCHOR = "beginning"
# Text and source files are cut into line ranges so that a citation points somewhere useful.
_LINES_SOFT, _LINES_HARD = 40, 120
_CHARS_SOFT, _CHARS_HARD = 2000, 6000
_TITLE_CHARS = 400  # of a heading, read for its anchor


def heading_anchor(title: str) -> str:
    """The anchor for a section that starts at a heading."""
    title = " ".join(title.split())
    return "§ " + (title if len(title) <= 60 else title[:59].rstrip() + "…")


def line_anchor(first: int, last: int) -> str:
    """The anchor for a range of 1-based lines."""
    return f"line {first}" if first == last else f"lines {first}–{last}"


def line_sections(text: str, first_line: int = 1) -> list[Section]:
    """Cut text into sections of whole lines, preferring breaks at blank lines."""
    sections: list[Section] = []
    lines = text.split("\n")
    start, size = 0, 0
    for i, line in enumerate(lines):
        size += len(line) + 1
        count = i - start + 1
        soft = (count >= _LINES_SOFT or size >= _CHARS_SOFT) and not line.strip()
        if soft or count >= _LINES_HARD or size >= _CHARS_HARD or i == len(lines) - 1:
            # The anchor names the lines that hold text, not the blank ones around them.
            kept = [n for n in range(start, i + 1) if lines[n].strip()]
            if kept:
                body = "\n".join(lines[kept[0]:kept[-1] + 1])
                sections.append(Section(body, line_anchor(first_line + kept[0], first_line + kept[-1])))
            start, size = i + 1, 0
    return sections


_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def markdown_sections(text: str) -> list[Section]:
    """One section per ATX (`# Title`) or setext heading; code fences are not scanned for headings."""
    lines = text.split("\n")
    starts: list[tuple[int, str]] = []  # (line index where the section starts, heading)
    fence = None
    # YAML front matter ends with a `---` that would otherwise read as a setext underline.
    skip_to = lines.index("---", 1) + 1 if lines[0] == "---" and "---" in lines[1:] else 0
    for i, line in enumerate(lines):
        if i < skip_to:
            continue
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        if (title := atx_heading(line)) is not None:
            starts.append((i, title))
        elif (_SETEXT.match(line) and i > skip_to and lines[i - 1].strip()
              and not (_SETEXT.match(lines[i - 1]) or _FENCE.match(lines[i - 1])
                       or atx_heading(lines[i - 1]) is not None)):
            starts.append((i - 1, lines[i - 1]))
    if not starts:
        return line_sections(text)
    sections: list[Section] = []
    if starts[0][0] > 0:
        sections.append(Section("\n".join(lines[:starts[0][0]]), START_ANCHOR))
    for n, (begin, title) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        sections.append(Section("\n".join(lines[begin:end]).strip("\n"), heading_anchor(_plain(title))))
    return sections


def atx_heading(line: str) -> str | None:
    """The title of an ATX heading line (`## Title ##`), or None; linear in the line."""
    indent = len(line) - len(line.lstrip(" "))
    body = line[indent:]
    level = len(body) - len(body.lstrip("#"))
    rest = body[level:]
    if indent > 3 or not 1 <= level <= 6 or not rest[:1].isspace():
        return None
    title = rest.strip()
    closing = title.rstrip("#")  # a closing run of #s after a space is not part of the title
    if not closing:
        return ""
    return closing.rstrip() if closing != title and closing[-1].isspace() else title


def _plain(markdown: str) -> str:
    markdown = markdown[:_TITLE_CHARS]  # only the start names the anchor; a bound keeps the regex cheap
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    return re.sub(r"[*_`]+", "", text).strip()


# Content of these elements is never shown to the reader of a page, so never to the model.
# (`head` is not listed: its end tag is optional, and a missing one would hide the whole body.)
_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math"})
_BLOCK = frozenset({"p", "div", "section", "article", "header", "footer", "main", "nav", "aside",
                    "blockquote", "ul", "ol", "dl", "dt", "dd", "table", "tr", "form", "fieldset",
                    "figure", "figcaption", "address", "hr", "caption", "details", "summary", "title"})
_HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})


class _HTMLText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[Section] = []
        self.anchor = START_ANCHOR
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0
        self.heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in _SKIP:
            self.skip += 1
        elif self.skip:
            return
        elif tag in _HEADINGS:
            self._flush()
            self.heading = []
            self.parts.append("\n")
        elif tag == "br":
            self.parts.append("\n")
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append(" | ")
        elif tag == "pre":
            self.pre += 1
            self.parts.append("\n")
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
        elif self.skip:
            return
        elif tag in _HEADINGS and self.heading is not None:
            title = " ".join("".join(self.heading).split())
            if title:
                self.anchor = heading_anchor(title)
            self.heading = None
            self.parts.append("\n")
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self.parts.append("\n")
        elif tag in _BLOCK or tag == "li":
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        if self.pre:
            # Shield code indentation from the whitespace cleanup in _flush().
            data = data.replace(" ", "\x01").replace("\t", "\x02")
        else:
            data = re.sub(r"\s+", " ", data)
        self.parts.append(data)
        if self.heading is not None:
            self.heading.append(data)

    def _flush(self) -> None:
        text = "\n".join(line.strip(" \t") for line in "".join(self.parts).split("\n"))
        text = re.sub(r"\n{3,}", "\n\n", text).strip().replace("\x01", " ").replace("\x02", "\t")
        self.sections.append(Section(text, self.anchor))
        self.parts = []

    def finish(self) -> list[Section]:
        self.close()
        self._flush()
        return self.sections


def html_sections(text: str) -> list[Section]:
    """Visible text of an HTML page, one section per heading; scripts and styles dropped."""
    parser = _HTMLText()
    parser.feed(text)
    return parser.finish()
