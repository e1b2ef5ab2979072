"""PowerPoint 97-2003 (.ppt) text without LibreOffice: the "PowerPoint Document" stream's records read as
[MS-PPT] lays them out, in milliseconds where a LibreOffice start takes seconds. olefile opens the compound
file. The newest persist directory (following the user-edit chain, so incremental saves give each slide's
latest version) finds the document, its slide and notes lists, and each slide's drawing; a shape's text is in
its client text box, directly or as a reference into the slide list's text. Shapes in reading order
(top, then left), titles as headings, speaker notes after the slide: the Markdown the .pptx reader writes.
No images (the Pictures stream is not read). Anything unexpected gives None: the caller converts the file
with LibreOffice instead."""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from chalicelib.ports import ReadResult

_HEADER = struct.Struct("<HHI")
_U32 = struct.Struct("<I")
_ANCHOR_SMALL = struct.Struct("<hhhh")
_ANCHOR_LARGE = struct.Struct("<iiii")

_DOCUMENT = 0x03E8
_SLIDE = 0x03EE
_SLIDE_ATOM = 0x03EF
_NOTES = 0x03F0
_SLIDE_PERSIST_ATOM = 0x03F3
_SLIDE_LIST_WITH_TEXT = 0x0FF0
_TEXT_HEADER_ATOM = 0x0F9F
_TEXT_CHARS_ATOM = 0x0FA0
_TEXT_BYTES_ATOM = 0x0FA8
_OUTLINE_TEXT_REF_ATOM = 0x0F9E
_USER_EDIT_ATOM = 0x0FF5
_PERSIST_DIRECTORY_ATOM = 0x1772
_SHAPE = 0xF004
_CLIENT_ANCHOR = 0xF010
_CLIENT_TEXTBOX = 0xF00D
_PLAIN_CURRENT_USER = 0xE391C05F  # an encrypted file has 0xF3D1C4DF: LibreOffice says so
_TITLE_TYPES = {0, 6}  # Tx_TYPE_TITLE, Tx_TYPE_CENTERTITLE
_NOTES_TYPE = 2


class _Damaged(Exception):
    """A record that does not fit the stream, or a reference to nothing."""


@dataclass
class _Text:
    kind: int
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts).replace("\x0b", "\n").strip()


def _children(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, bool, int, int]]:
    """(type, instance, is container, payload start, payload end) of each record in [start, end)."""
    pos = start
    while pos + 8 <= end:
        ver_inst, kind, length = _HEADER.unpack_from(data, pos)
        body = pos + 8
        stop = body + length
        if stop > end:
            raise _Damaged(f"record {kind:#x} at {pos} runs past its container")
        yield kind, ver_inst >> 4, ver_inst & 0xF == 0xF, body, stop
        pos = stop


def _record_at(data: bytes, offset: int, kind: int) -> tuple[int, int]:
    if offset + 8 > len(data):
        raise _Damaged(f"no record at {offset}")
    _ver_inst, found, length = _HEADER.unpack_from(data, offset)
    if found != kind or offset + 8 + length > len(data):
        raise _Damaged(f"expected record {kind:#x} at {offset}, found {found:#x}")
    return offset + 8, offset + 8 + length


def _persist_directory(data: bytes, current_user: bytes) -> tuple[dict[int, int], int]:
    """persist id → stream offset (newest edit wins) and the document's persist id."""
    if len(current_user) < 20 or _U32.unpack_from(current_user, 12)[0] != _PLAIN_CURRENT_USER:
        raise _Damaged("encrypted or not a PowerPoint 97-2003 current-user record")
    offset = _U32.unpack_from(current_user, 16)[0]
    edits: list[int] = []
    document_ref = 0
    seen: set[int] = set()
    while offset and offset not in seen:
        seen.add(offset)
        start, end = _record_at(data, offset, _USER_EDIT_ATOM)
        if end - start < 20:
            raise _Damaged("short user-edit record")
        last_edit, directory = struct.unpack_from("<II", data, start + 8)
        if not edits:
            document_ref = _U32.unpack_from(data, start + 16)[0]
        edits.append(directory)
        offset = last_edit
    persist: dict[int, int] = {}
    for directory in reversed(edits):  # oldest first: newer entries override
        start, end = _record_at(data, directory, _PERSIST_DIRECTORY_ATOM)
        pos = start
        while pos + 4 <= end:
            head = _U32.unpack_from(data, pos)[0]
            first, count = head & 0xFFFFF, head >> 20
            pos += 4
            if pos + 4 * count > end:
                raise _Damaged("persist directory entry runs past its record")
            for i in range(count):
                persist[first + i] = _U32.unpack_from(data, pos + 4 * i)[0]
            pos += 4 * count
    if not edits:
        raise _Damaged("no user edit")
    return persist, document_ref


def _text_records(data: bytes, start: int, end: int, kind: int, texts: list[_Text]) -> None:
    """Appends the text of a text-header/chars/bytes run of records to `texts`."""
    if kind == _TEXT_HEADER_ATOM:
        texts.append(_Text(_U32.unpack_from(data, start)[0] if end - start >= 4 else 4))
    elif kind in (_TEXT_CHARS_ATOM, _TEXT_BYTES_ATOM):
        if not texts:
            texts.append(_Text(4))
        raw = data[start:end]
        texts[-1].parts.append(
            raw.decode("utf-16-le", "replace") if kind == _TEXT_CHARS_ATOM else raw.decode("latin-1")
        )


def _slide_lists(data: bytes, document: tuple[int, int]) -> dict[int, list[tuple[bytes, list[_Text]]]]:
    """instance (0 slides, 2 notes) → [(persist atom payload, its placeholder texts)] in list order."""
    lists: dict[int, list[tuple[bytes, list[_Text]]]] = {}
    for kind, instance, _container, start, end in _children(data, *document):
        if kind != _SLIDE_LIST_WITH_TEXT:
            continue
        entries = lists.setdefault(instance, [])
        for child, _inst, _c, body, stop in _children(data, start, end):
            if child == _SLIDE_PERSIST_ATOM:
                entries.append((data[body:stop], []))
            elif entries:
                _text_records(data, body, stop, child, entries[-1][1])
    return lists


def _shapes(
    data: bytes, start: int, end: int, out: list[tuple[tuple[int, int] | None, list[_Text], list[int]]]
) -> None:
    """Every shape under [start, end), depth first: (its own top/left or None, its texts, its references
    into the slide list's texts)."""
    for kind, _instance, container, body, stop in _children(data, start, end):
        if kind == _SHAPE:
            anchor: tuple[int, int] | None = None
            texts: list[_Text] = []
            refs: list[int] = []
            for child, _inst, _c, cbody, cstop in _children(data, body, stop):
                if child == _CLIENT_ANCHOR:
                    size = cstop - cbody
                    if size == 8:
                        top, left, _r, _b = _ANCHOR_SMALL.unpack_from(data, cbody)
                        anchor = (top, left)
                    elif size >= 16:
                        top, left, _r, _b = _ANCHOR_LARGE.unpack_from(data, cbody)
                        anchor = (top, left)
                elif child == _CLIENT_TEXTBOX:
                    for tkind, _i, _tc, tbody, tstop in _children(data, cbody, cstop):
                        if tkind == _OUTLINE_TEXT_REF_ATOM and tstop - tbody >= 4:
                            refs.append(_U32.unpack_from(data, tbody)[0])
                        else:
                            _text_records(data, tbody, tstop, tkind, texts)
            out.append((anchor, texts, refs))
        elif container:
            _shapes(data, body, stop, out)


def _drawing_texts(data: bytes, start: int, end: int, listed: list[_Text]) -> list[_Text]:
    """A slide's (or notes page's) texts in reading order: top to bottom, left to right; a shape without its
    own position stays after the one before it; slide-list texts no shape refers to come last."""
    shapes: list[tuple[tuple[int, int] | None, list[_Text], list[int]]] = []
    _shapes(data, start, end, shapes)
    keyed: list[tuple[tuple[int, int], int, list[_Text]]] = []
    last = (-(2**31), -(2**31))
    used: set[int] = set()
    for i, (anchor, texts, refs) in enumerate(shapes):
        last = anchor or last
        for ref in refs:
            if 0 <= ref < len(listed):
                texts.append(listed[ref])
                used.add(ref)
        keyed.append((last, i, texts))
    keyed.sort(key=lambda t: (t[0], t[1]))
    ordered = [text for _key, _i, texts in keyed for text in texts]
    return ordered + [text for i, text in enumerate(listed) if i not in used]


def _slide_lines(texts: list[_Text]) -> tuple[list[str], str]:
    lines: list[str] = []
    title = ""
    for entry in texts:
        text = entry.text
        if not text:
            continue
        if entry.kind in _TITLE_TYPES:
            heading = " ".join(text.split())
            lines.append(f"# {heading}")
            title = title or heading
            continue
        lines.extend(p.strip() for p in text.split("\r") if p.strip())
    return lines, title


def _read(data: bytes, current_user: bytes, check_time: Callable[[], None]) -> ReadResult:
    persist, document_ref = _persist_directory(data, current_user)
    if document_ref not in persist:
        raise _Damaged("no document record")
    document = _record_at(data, persist[document_ref], _DOCUMENT)
    lists = _slide_lists(data, document)
    notes_by_id: dict[int, str] = {}
    for atom, listed in lists.get(2, []):
        if len(atom) < 16 or _U32.unpack_from(atom, 0)[0] not in persist:
            continue
        ref, notes_id = _U32.unpack_from(atom, 0)[0], _U32.unpack_from(atom, 12)[0]
        page = _record_at(data, persist[ref], _NOTES)
        texts = [t.text for t in _drawing_texts(data, *page, listed) if t.kind == _NOTES_TYPE and t.text]
        if texts:
            notes_by_id[notes_id] = "\n".join(texts).replace("\r", "\n")
    parts: list[str] = []
    title = ""
    for number, (atom, listed) in enumerate(lists.get(0, []), start=1):
        if number % 64 == 0:
            check_time()  # a forged slide list can point every entry at one big slide
        if len(atom) < 4 or _U32.unpack_from(atom, 0)[0] not in persist:
            raise _Damaged("a slide without its record")
        start, end = _record_at(data, persist[_U32.unpack_from(atom, 0)[0]], _SLIDE)
        lines, slide_title = _slide_lines(_drawing_texts(data, start, end, listed))
        title = title or slide_title
        notes_id = 0
        for kind, _instance, _container, body, stop in _children(data, start, end):
            if kind == _SLIDE_ATOM and stop - body >= 20:
                notes_id = _U32.unpack_from(data, body + 16)[0]
                break
        notes = notes_by_id.get(notes_id, "") if notes_id else ""
        block = [f"<!-- Slide number: {number} -->", *lines]
        if notes.strip():
            block.append("### Notes:\n" + notes.strip())
        parts.append("\n\n".join(block))
    markdown = "\n\n".join(parts).strip()
    return ReadResult(
        markdown=markdown + "\n" if markdown else "",
        title=title[:300],
        metadata={"slides": len(parts), "read_by": "ppt-records"},
    )


def read_ppt_natively(data: bytes, check_time: Callable[[], None] = lambda: None) -> ReadResult | None:
    """The presentation's text, or None when olefile is not installed or the file is not a PowerPoint
    97-2003 file this reader understands (encrypted, older, damaged): LibreOffice's turn then."""
    try:
        import olefile
    except ImportError:
        return None
    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:  # bytes under 1,536 would be a path
            if not (ole.exists("PowerPoint Document") and ole.exists("Current User")):
                return None
            stream = ole.openstream("PowerPoint Document").read()
            current_user = ole.openstream("Current User").read()
    except (OSError, ValueError, struct.error):  # olefile's errors for a damaged container
        return None
    return read_ppt_streams(stream, current_user, check_time)


def read_ppt_streams(
    stream: bytes, current_user: bytes, check_time: Callable[[], None] = lambda: None
) -> ReadResult | None:
    """The "PowerPoint Document" and "Current User" streams' text, or None where the records do not add up."""
    try:
        result = _read(stream, current_user, check_time)
    except (_Damaged, struct.error, RecursionError):  # RecursionError: containers nested past Python's stack
        return None
    return result if result.metadata["slides"] else None
