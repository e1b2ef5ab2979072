"""Shared pieces of the parser engines: the engine protocol, limits, content sniffing and the zip guard."""

from __future__ import annotations

import hashlib
import io
import re
import threading
import time
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.image_limits import MAX_IMAGE_PIXELS
from chalicelib.parsers.magic import OLE_MAGIC, audio_kind, is_iso_media
from chalicelib.ports import AsrEngine, OcrEngine, ParsedImage, ReadRequest, ReadResult


@dataclass(frozen=True)
class Limits:
    """Caps that keep one hostile file from exhausting a worker's memory or time."""

    max_input_bytes: int = 100 * 1024 * 1024
    zip_max_members: int = 20_000
    zip_max_total_uncompressed: int = 300 * 1024 * 1024
    zip_max_member_uncompressed: int = 128 * 1024 * 1024
    zip_max_ratio: float = 200.0  # per member, only judged above 1 MB uncompressed
    #: an XML part read whole into a tree (a docx's body, notes and styles, a pptx's slides, notes and charts),
    #: in marks: its '<' and '=' bytes (tags and attributes), counted before lxml parses it. The byte caps above
    #: let a 1 MB file inflate to a 128 MB part, which took ~34x that in lxml and the docx transform (the
    #: docreader's 3008 MB gone: killed, not failed). Measured per mark, tree and transform: ~385 bytes at most
    #: in a docx (empty paragraphs, a line each), ~520 in a pptx slide of empty shapes (~800 with a chart part
    #: as large), ~140 in real documents at ~12 bytes of XML per mark: a real document.xml of up to ~35 MB
    #: (over 1,000 pages) is read, a bomb's part stays within ~1.2 GB (a deck's worst ~2.4 GB).
    xml_part_max_marks: int = 3_000_000
    max_sheet_cells: int = 5_000_000
    max_csv_bytes: int = 100 * 1024 * 1024
    max_pages: int = 5_000
    # a PDF's compressed streams as they inflate (guards.check_pdf_streams): pdfium inflates a page's content
    # whole and aborts the process when the allocation fails; a legitimate image is at most max_image_pixels
    pdf_max_stream_inflated: int = 256 * 1024 * 1024
    pdf_max_total_inflated: int = 1024 * 1024 * 1024
    max_images: int = 50
    max_markdown_chars: int = 50_000_000
    convert_timeout_s: float = 180.0
    max_image_pixels: int = MAX_IMAGE_PIXELS
    max_html_depth: int = 10_000  # element nesting; tree builders slow down per open element
    #: wall time for one parse, checked between steps: within the docreader's 900 s with room to store what it
    #: read (and, for a page, up to 120 s of remote images); settings' page ranges are sized to fit in it
    parse_budget_s: float = 600.0

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Limits:
        raw = options.get("limits")
        if not isinstance(raw, dict):
            return cls()
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass
class ParseContext:
    ocr: OcrEngine | None = None
    asr: AsrEngine | None = None
    limits: Limits = field(default_factory=Limits)
    options: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    # a docx/pptx's members, checked: name → bytes (None for a member not kept), either as check_zip inflated
    # them or inflated and checked as they are read (guards.PackageParts), so that none is inflated twice
    package_parts: Mapping[str, bytes | None] | None = None
    # an xlsx's worksheet parts → (cells written, rows, columns spanned) as the preflight measured them
    # (guards.check_zip), so that the reader does not measure the sheets again
    sheet_measures: Mapping[str, tuple[int, int, int]] | None = None

    def check_time(self, what: str = "the file") -> None:
        """Between steps of a parse: refuses a file whose parse has used up `limits.parse_budget_s`."""
        if time.monotonic() - self.started > self.limits.parse_budget_s:
            raise parse_failed(
                f"Parsing {what} took longer than {int(self.limits.parse_budget_s)} s, the limit for one "
                "file; split it into smaller files."
            )


class MarkdownBudget:
    """The characters of Markdown a parse has produced so far, refused once past the limit for one file:
    a part listed many times (a slide, an EPUB chapter) would otherwise build gigabytes before the reader
    measures the result."""

    def __init__(self, limits: Limits) -> None:
        self.limit = limits.max_markdown_chars
        self.used = 0

    def add(self, text: str) -> str:
        self.count(len(text))
        return text

    def count(self, chars: int) -> None:
        """Counts text measured without building it (the text a workbook's cells repeat)."""
        self.used += chars
        if self.used > self.limit:
            raise parse_failed(
                f"The document's text is more than {self.limit:,} characters, the limit for one file."
            )


Measure = TypeVar("Measure")


class MeasuredOnce(Generic[Measure]):
    """A check's result on the same bytes, kept for the last few files (a digest of each): the reader's
    preflight and then an engine (an HTML page, an EPUB chapter), or a PDF's page count and then the
    preflight, check the same upload. A check that refuses keeps nothing (it refuses again)."""

    def __init__(self, keep: int = 64) -> None:
        self.keep = keep
        self.results: OrderedDict[tuple[bytes, Hashable], Measure] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, data: bytes, setting: Hashable, measure: Callable[[], Measure]) -> Measure:
        key = (hashlib.blake2b(data, digest_size=16).digest(), setting)
        with self.lock:
            if key in self.results:
                self.results.move_to_end(key)
                return self.results[key]
        result = measure()
        with self.lock:
            self.results[key] = result
            while len(self.results) > self.keep:
                self.results.popitem(last=False)
        return result


class ParserEngine(Protocol):
    name: str
    description: str
    file_types: frozenset[str]

    def availability(self) -> tuple[bool, str]:
        """(available, reason when not)."""
        ...

    def parse(self, request: ReadRequest, ctx: ParseContext) -> ReadResult: ...


def parse_failed(message: str) -> PermanentStageError:
    return PermanentStageError(message, code=SpanErrorCode.DOCREADER_PARSE_FAILED)


def unsupported(message: str) -> PermanentStageError:
    return PermanentStageError(message, code=SpanErrorCode.UNSUPPORTED_TYPE)


# ---------------------------------------------------------------- sniffing

IMAGE_MAGIC: list[tuple[bytes, str, str]] = [
    (b"\x89PNG\r\n\x1a\n", "png", "image/png"),
    (b"\xff\xd8\xff", "jpg", "image/jpeg"),
    (b"GIF87a", "gif", "image/gif"),
    (b"GIF89a", "gif", "image/gif"),
    (b"BM", "bmp", "image/bmp"),
    (b"II*\x00", "tiff", "image/tiff"),
    (b"MM\x00*", "tiff", "image/tiff"),
]


def md_image_alt(text: str) -> str:
    """`text` as an image's alt text in Markdown (`![alt](…)`): without the brackets and backslashes that
    would end or escape it early (a file name `chart](x).png` made a link of its own), on one line."""
    return " ".join(re.sub(r"[\[\]\\]", "", text).split())


def image_kind(data: bytes) -> tuple[str, str] | None:
    """(extension, mime) for image bytes, None when the bytes are not a known image."""
    for magic, ext, mime in IMAGE_MAGIC:
        if data.startswith(magic):
            return ext, mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp", "image/webp"
    return None


#: UTF-16 text without a byte-order mark whose NULs are few (CJK, Cyrillic, Greek, ... with ASCII spaces and
#: line breaks) is told from binary data by what it decodes to: nearly all characters of scripts people write
_SCRIPT_SHARE = 0.95
_MIN_SCRIPT_CHARS = 32
_SCRIPT_RANGES = (
    (0x20, 0x7E),  # ASCII
    (0xA0, 0x24F),  # Latin-1, Latin extended
    (0x370, 0x6FF),  # Greek, Cyrillic, Armenian, Hebrew, Arabic
    (0x900, 0xDFF),  # Indic scripts
    (0xE00, 0xE7F),  # Thai
    (0x2000, 0x206F),  # general punctuation
    (0x3000, 0x30FF),  # CJK punctuation, kana
    (0x3130, 0x318F),  # Hangul compatibility jamo
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0xFF00, 0xFFEF),  # full- and half-width forms
)
_WRITTEN_RUN = re.compile(
    "[\t\n\r"
    + "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in _SCRIPT_RANGES)
    + "]+"
)


def wide_text_codec(data: bytes) -> str | None:
    """The codec of UTF-32 or UTF-16 text, whose NUL bytes are characters' zero halves, not binary data: by
    its byte-order mark, or without one by the NULs' place (ASCII-heavy UTF-16 has a NUL in every other
    byte, on one side only; binary data has them on both) and, where they are few (CJK text, whose only
    NULs are its spaces and line breaks), by decoding to nearly only characters of written scripts. None
    for anything else (UTF-16 without a NUL at all is not told from 8-bit text: "Bush hid the facts")."""
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "utf-32"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    sample = data[: 4096 - 4096 % 2] if len(data) >= 4096 else data[: len(data) - len(data) % 2]
    if len(sample) < 4 or b"\x00" not in sample:
        return None
    evens, odds = sample[0::2], sample[1::2]
    for zeros, others, codec in ((odds, evens, "utf-16-le"), (evens, odds, "utf-16-be")):
        nuls, stray = zeros.count(0), others.count(0)  # stray: a character such as U+4E00 "一"
        if not nuls or stray > nuls:
            continue
        try:
            text = sample.decode(codec)
        except UnicodeDecodeError:
            if len(sample) == len(data):
                return None
            try:  # the sample may end inside a surrogate pair
                text = sample[:-2].decode(codec)
            except UnicodeDecodeError:
                return None
        if (nuls >= 0.3 * len(zeros) and stray <= 0.01 * len(others)) or _mostly_written(text):
            return codec
    return None


def _mostly_written(text: str) -> bool:
    if len(text) < _MIN_SCRIPT_CHARS:
        return False
    written = sum(len(run) for run in _WRITTEN_RUN.findall(text))
    return written >= _SCRIPT_SHARE * len(text)


def sniff(data: bytes) -> str:
    """A coarse content family: pdf, zip, ole, image, audio, text, binary or empty."""
    if not data:
        return "empty"
    head = data[:4096]
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(OLE_MAGIC):
        return "ole"
    if image_kind(head):
        return "image"
    if audio_kind(head) or is_iso_media(head):  # a video's family too: refused by its type
        return "audio"
    if b"\x00" in head[:2048] and wide_text_codec(data) is None:
        return "binary"
    return "text"


def zip_office_kind(zf: zipfile.ZipFile) -> str:
    """docx / xlsx / pptx / epub for an OOXML or EPUB container, '' otherwise."""
    names = set(zf.namelist())
    if "word/document.xml" in names:
        return "docx"
    if "xl/workbook.xml" in names:
        return "xlsx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    if "META-INF/container.xml" in names or "mimetype" in names:
        return "epub"
    return ""


FAMILY_OF_TYPE = {
    "pdf": "pdf",
    "docx": "zip",
    "xlsx": "zip",
    "pptx": "zip",
    "epub": "zip",
    "doc": "ole",
    "xls": "ole",
    "ppt": "ole",
    "png": "image",
    "jpg": "image",
    "jpeg": "image",
    "gif": "image",
    "mp3": "audio",
    "wav": "audio",
    "m4a": "audio",
    "flac": "audio",
    "ogg": "audio",
}
OLE_TWIN = {"docx": "doc", "xlsx": "xls", "pptx": "ppt", "doc": "doc", "xls": "xls", "ppt": "ppt"}
FAMILY_WORDS = {
    "pdf": "a PDF",
    "zip": "a ZIP/Office Open XML file",
    "ole": "a legacy Office (OLE) file",
    "image": "an image",
    "audio": "audio",
    "text": "plain text or markup",
    "binary": "binary data",
    "empty": "empty",
}


def resolve_file_type(data: bytes, file_type: str, listing: list[zipfile.ZipInfo] | None = None) -> str:
    """The type to parse as: reroutes misnamed Office files (WeKnora: OLE bytes named .docx → doc) and
    rejects an extension that lies about the content with a message naming both. For a zip, `listing` (when
    given) receives its central directory as read here, so that the preflight does not read it again."""
    family = sniff(data)
    expected = FAMILY_OF_TYPE.get(file_type)
    if family == "empty":
        raise parse_failed("The file is empty.")
    if expected is None or expected == family:
        if family == "zip" and file_type in ("docx", "xlsx", "pptx", "epub"):
            return _zip_reroute(data, file_type, listing)
        if expected is None and family in ("pdf", "zip", "ole") and file_type in TEXT_TYPES:
            raise unsupported(f"The file is named .{file_type} but its content is {FAMILY_WORDS[family]}.")
        return file_type
    if family == "ole" and file_type in OLE_TWIN:
        return OLE_TWIN[file_type]
    if family == "zip" and file_type in ("docx", "xlsx", "pptx", "epub", "doc", "xls", "ppt"):
        return _zip_reroute(data, file_type, listing)
    if family == "text" and (exported := _text_export_type(data, file_type)):
        return exported
    raise unsupported(
        f"The file is named .{file_type} but its content is {FAMILY_WORDS.get(family, family)}; "
        "rename it with the right extension or re-export it."
    )


TEXT_TYPES = frozenset({"txt", "md", "markdown", "csv", "json", "html", "htm", "mhtml"})


def is_rtf(data: bytes) -> bool:
    return data[:64].lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{\\rtf")


_HTML_MARKS = ("<!doctype html", "<html", "<head", "<body", "<table", "<meta")


def _text_export_type(data: bytes, file_type: str) -> str:
    """The type of a text file that a program saved under a legacy Office name, as many do: HTML (Excel's
    and reporting tools' "export to .xls", Word's web page) or MHTML named .xls/.doc is read as such; RTF
    named .doc (Word's, WordPad's) stays .doc, which is converted with LibreOffice (engines). '' else."""
    if file_type not in ("doc", "xls"):
        return ""
    if file_type == "doc" and is_rtf(data):
        return "doc"
    codec = wide_text_codec(data)
    head = data[:4096].decode(codec or "latin-1", errors="ignore").lstrip("\ufeff \t\r\n").lower()
    if head.startswith("mime-version:"):
        return "mhtml"
    if head.startswith("<?xml") and "<html" not in head:
        return ""  # Excel 2003's XML spreadsheet (its <Table> is not HTML's) or other XML
    if head.startswith("<") and any(mark in head for mark in _HTML_MARKS):
        return "html"
    return ""


#: What zipfile raises when a damaged archive's directory is read: BadZipFile, OSError for a seek past the
#: end, UnicodeDecodeError (a ValueError) for a name flagged UTF-8 that is not, NotImplementedError for a
#: zip version it does not support.
ZIP_DIRECTORY_ERRORS = (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError)
#: The same when a member is read, plus RuntimeError for an encrypted member (an unsupported compression
#: method is a NotImplementedError, already above).
ZIP_MEMBER_ERRORS = (*ZIP_DIRECTORY_ERRORS, RuntimeError)


def _zip_reroute(data: bytes, file_type: str, listing: list[zipfile.ZipInfo] | None) -> str:
    damaged = f"The .{file_type} file is damaged or truncated (not a readable ZIP)."
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            # the file's first member starts it: a directory whose members start later is another zip's
            # inside this one (a truncated deck's embedded workbook), the file's own directory cut off
            if infos and min(info.header_offset for info in infos) != 0:
                raise parse_failed(damaged)
            kind = zip_office_kind(zf)
            opendocument = _opendocument_kind(zf) if kind == "epub" else ""
            if listing is not None:
                listing.extend(infos)
    except ZIP_DIRECTORY_ERRORS as exc:
        raise parse_failed(damaged) from exc
    if not kind:
        raise unsupported(f"The file is named .{file_type} but it is a ZIP archive of another kind.")
    if opendocument:
        twin = _OPENDOCUMENT_TWIN.get(opendocument, "docx")
        raise unsupported(
            f"The file is named .{file_type} but it is an OpenDocument {opendocument} file, not a Microsoft "
            f"Office file or an EPUB; save it as .{twin} and upload it again."
        )
    return kind


#: an OpenDocument package's kind (its mimetype: application/vnd.oasis.opendocument.<kind>) → the Office type
_OPENDOCUMENT_TWIN = {"text": "docx", "spreadsheet": "xlsx", "presentation": "pptx"}


def _opendocument_kind(zf: zipfile.ZipFile) -> str:
    """An OpenDocument package's kind ('' for anything else: an EPUB): its mimetype member says."""
    try:
        with zf.open("mimetype") as fh:
            mime = fh.read(128).strip().decode("ascii", errors="replace")
    except (*ZIP_MEMBER_ERRORS, KeyError):
        return ""
    kind = mime.removeprefix("application/vnd.oasis.opendocument.")
    if kind == mime:
        return ""
    return kind if kind in _OPENDOCUMENT_TWIN else "document"


# ---------------------------------------------------------------- zip guard

XML_SUFFIXES = (".xml", ".rels", ".xhtml", ".html", ".htm", ".opf", ".ncx", ".vml")


def open_zip_checked(
    data: bytes, limits: Limits, what: str, *, scan_entities: bool = True
) -> zipfile.ZipFile:
    """Opens a zip after checking declared sizes and ratios (zip bombs) and entity declarations in
    its XML parts (billion laughs / XXE; `scan_entities=False` for a caller that inflates every part itself
    and looks for them there, as guards.check_zip). Raises PermanentStageError."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except ZIP_DIRECTORY_ERRORS as exc:
        raise parse_failed(f"The {what} file is damaged or truncated (not a readable ZIP).") from exc
    check_declared_sizes(infos, limits, what)
    for info in infos if scan_entities else ():
        if info.filename.lower().endswith(XML_SUFFIXES) and info.file_size:
            try:
                declares = _declares_entities(zf, info, limits.zip_max_member_uncompressed)
            except ZIP_MEMBER_ERRORS as exc:
                raise parse_failed(f"The {what} file is damaged or truncated ({info.filename}).") from exc
            if declares:
                raise parse_failed(
                    f"The {what} file contains XML entity declarations, which are not allowed."
                )
    return zf


def check_declared_sizes(infos: list[zipfile.ZipInfo], limits: Limits, what: str) -> None:
    """What a zip's central directory says, checked before anything is inflated: the number of parts, each
    part's and the total's declared size, and the declared ratio (zip bombs). Raises PermanentStageError."""
    if len(infos) > limits.zip_max_members:
        raise parse_failed(f"The {what} file has too many parts ({len(infos)}); it looks like a zip bomb.")
    total = 0
    for info in infos:
        total += info.file_size
        if info.file_size > limits.zip_max_member_uncompressed or total > limits.zip_max_total_uncompressed:
            raise parse_failed(
                f"The {what} file would expand to more than "
                f"{limits.zip_max_total_uncompressed // (1024 * 1024)} MB; it looks like a zip bomb."
            )
        if info.file_size > 1024 * 1024 and info.file_size > limits.zip_max_ratio * max(
            info.compress_size, 1
        ):
            raise parse_failed(
                f"The {what} file is compressed at an implausible ratio; it looks like a zip bomb."
            )


_ENTITY_DECLARATION = b"<!entity"


def _declares_entities(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bool:
    """Whether an XML part declares an entity anywhere (not only in its first bytes), read in pieces
    with the end of each piece carried over, and never past `limit` bytes produced."""
    carry = b""
    produced = 0
    with zf.open(info) as fh:
        while piece := fh.read(1 << 16):
            produced += len(piece)
            if produced > limit:
                raise parse_failed(
                    "A part of the file expands beyond the allowed size; it looks like a zip bomb."
                )
            window = carry + piece.lower()
            if _ENTITY_DECLARATION in window:
                return True
            carry = window[-(len(_ENTITY_DECLARATION) - 1) :]
    return False


def read_member(zf: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """Reads one zip member, stopping at `limit` bytes whatever the header claims."""
    with zf.open(name) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise parse_failed("A part of the file expands beyond the allowed size; it looks like a zip bomb.")
    return data


ImageSink = Callable[[ParsedImage], str]
