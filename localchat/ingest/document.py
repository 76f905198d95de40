"""A Document (a file's text in sections, each with a citable anchor) and the errors of reading one."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import LocalchatError


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
