"""Parsing: what the docreader reads and returns, and the image resolver."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class ParsedImage:
    """An image a parser found: `ref` is how the Markdown points at it before it is stored."""

    ref: str
    data: bytes
    mime_type: str = "image/png"
    page: int | None = None
    is_original: bool = False  # the uploaded file itself: exempt from the icon filter
    tag: str = ""  # e.g. 'scanned_pdf' for rendered scanned pages


@dataclass
class ReadRequest:
    data: bytes
    file_name: str
    file_type: str
    engine: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    url: str = ""


@dataclass
class ReadResult:
    markdown: str
    images: list[ParsedImage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    is_audio: bool = False
    audio: bytes = b""


class DocReader(Protocol):
    def read(self, request: ReadRequest) -> ReadResult:
        """Raises PermanentStageError for input that can never parse, TransientStageError otherwise.
        `options["page_range"] = (start, end)` parses only those pages of a PDF (0-based, end excluded)."""
        ...

    def page_count(self, request: ReadRequest) -> int | None:
        """The pages of a paged document (a PDF) without parsing it; None for other types."""
        ...

    def engines(self) -> list[dict[str, Any]]: ...


def iter_batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class StoredImage:
    """An image saved through the FileStore; `url` is what the rewritten Markdown points at."""

    url: str
    original_ref: str
    mime_type: str
    page: int | None = None
    width: int | None = None
    height: int | None = None
    tag: str = ""
    is_original: bool = False
    #: the bytes stored: the manifest carries it, so indexing counts it on the tenant's storage quota
    size: int = 0


@dataclass
class ResolvedImages:
    markdown: str
    images: list[StoredImage] = field(default_factory=list)
    dropped_icons: int = 0
    dropped_over_limit: int = 0
    failed: int = 0


class ImageResolver(Protocol):
    def resolve(
        self, markdown: str, images: Sequence[ParsedImage] = (), *, remote: bool = True
    ) -> ResolvedImages:
        """Stores every image the Markdown or the parser holds (data URIs, bare base64, parser refs,
        remote images through the SSRF-safe client), drops icons, and rewrites the links."""
        ...


SaveImage = Callable[[bytes, str], str]  # (bytes, extension) -> stored URL
