"""The footnotes and endnotes of a Word 97-2003 (.doc) file, which unword (the .doc body's reader) does not
read: their text is in the WordDocument stream after the main text's, found as [MS-DOC] lays it out (the FIB
gives each part's length, the table stream's piece table where each character range is stored). olefile
opens the compound file. Written as the .docx reader writes notes: Markdown footnotes `[^1]: text` (endnotes
`[^e1]: text`), numbered in order. The marks in the body cannot be placed (unword drops them), so only the
notes' texts come after the body. Anything that does not add up gives no notes, never an error: the body is
read all the same. Comments are not read (the .docx reader does not read them either)."""

from __future__ import annotations

import io
import re
import struct
from itertools import pairwise

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_PCD = struct.Struct("<HIH")

_WORD_IDENT = 0xA5EC  # FibBase.wIdent
_WHICH_TABLE = 0x0200  # FibBase.fWhichTblStm: 1Table, else 0Table
_FIB_BASE = 32
# FibRgLw97 (MS-DOC 2.5.5): the character counts of the main text and the subdocuments after it, in order
_CCP_TEXT, _CCP_FTN, _CCP_HDD, _CCP_MCR, _CCP_ATN, _CCP_EDN = 3, 4, 5, 6, 7, 8
# FibRgFcLcb97 (MS-DOC 2.5.6): (fc, lcb) pairs into the table stream
_PLCF_FND_TXT, _CLX, _PLCF_END_TXT = 3, 33, 47
_COMPRESSED = 0x40000000  # FcCompressed.fCompressed: cp1252 bytes at fc / 2, else UTF-16LE at fc

#: Word's marks in a text stream (a note's reference \x02, an annotation's \x05, a picture's \x01, a cell's
#: \x07, fields' \x13-\x15): left out, and breaks and the no-break hyphen as characters
WORD_MARKS = {
    **dict.fromkeys(c for c in range(32) if chr(c) not in "\t\n"),
    0x0B: "\n",
    0x0C: "\n",
    0x0D: "\n",
    0x1E: "-",
}
_FIELD_MARK = re.compile("([\x13\x14\x15])")


class _Damaged(Exception):
    """An offset or length that does not fit its stream."""


def _u32s(data: bytes, offset: int, count: int) -> tuple[int, ...]:
    if offset < 0 or count < 0 or offset + 4 * count > len(data):
        raise _Damaged(f"{count} values at {offset} run past the stream")
    return struct.unpack_from(f"<{count}I", data, offset)


def _fib(word: bytes) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """(the table stream is 1Table, FibRgLw97's counts, FibRgFcLcb's fc/lcb values), MS-DOC 2.5.1."""
    if len(word) < _FIB_BASE + 2 or _U16.unpack_from(word, 0)[0] != _WORD_IDENT:
        raise _Damaged("not a Word 97 FIB")
    one_table = bool(_U16.unpack_from(word, 0x0A)[0] & _WHICH_TABLE)
    pos = _FIB_BASE + 2 + 2 * _U16.unpack_from(word, _FIB_BASE)[0]  # past csw and FibRgW97
    if pos + 2 > len(word):
        raise _Damaged("FIB ends in FibRgW97")
    counts = _U16.unpack_from(word, pos)[0]
    lw = _u32s(word, pos + 2, counts)
    pos += 2 + 4 * counts
    if pos + 2 > len(word):
        raise _Damaged("FIB ends in FibRgLw97")
    pairs = _U16.unpack_from(word, pos)[0]
    fc_lcb = _u32s(word, pos + 2, 2 * pairs)
    if len(lw) <= _CCP_EDN or len(fc_lcb) <= 2 * _PLCF_END_TXT + 1:
        raise _Damaged("FIB shorter than Word 97's")
    return one_table, lw, fc_lcb


def _pair(fc_lcb: tuple[int, ...], index: int) -> tuple[int, int]:
    return fc_lcb[2 * index], fc_lcb[2 * index + 1]


def _pieces(table: bytes, fc: int, lcb: int) -> list[tuple[int, int, int, bool]]:
    """The piece table (Clx, MS-DOC 2.9.38): (first CP, CP after, byte offset, cp1252) of each piece."""
    pos, end = fc, fc + lcb
    if end > len(table):
        raise _Damaged("Clx runs past the table stream")
    while pos < end and table[pos] == 0x01:  # Prc: a property list to step over (MS-DOC 2.9.209)
        size = struct.unpack_from("<h", table, pos + 1)[0] if pos + 3 <= end else -1
        if size < 0:  # a negative size would step back: a loop
            raise _Damaged("Prc does not fit the Clx")
        pos += 3 + size
    if pos + 5 > end or table[pos] != 0x02:
        raise _Damaged("no Pcdt in the Clx")
    size = _U32.unpack_from(table, pos + 1)[0]
    pos += 5
    if size < 4 or pos + size > end or (size - 4) % 12:
        raise _Damaged("PlcPcd does not fit the Clx")
    count = (size - 4) // 12
    cps = _u32s(table, pos, count + 1)
    if any(first >= after for first, after in pairwise(cps)):
        raise _Damaged("piece table CPs not ascending")  # overlapping pieces would repeat their bytes
    pieces: list[tuple[int, int, int, bool]] = []
    for i in range(count):
        _flags, fc_compressed, _prm = _PCD.unpack_from(table, pos + 4 * (count + 1) + 8 * i)
        compressed = bool(fc_compressed & _COMPRESSED)
        offset = fc_compressed & 0x3FFFFFFF
        pieces.append((cps[i], cps[i + 1], offset // 2 if compressed else offset, compressed))
    return pieces


def _text(word: bytes, pieces: list[tuple[int, int, int, bool]], start: int, end: int) -> str:
    """The characters [start, end) of the document's text from the pieces that hold them."""
    parts: list[str] = []
    for first, after, offset, compressed in pieces:
        low, high = max(start, first), min(end, after)
        if low >= high:
            continue
        width = 1 if compressed else 2
        begin = offset + (low - first) * width
        stop = begin + (high - low) * width
        if stop > len(word):
            raise _Damaged("a piece runs past the WordDocument stream")
        raw = word[begin:stop]
        parts.append(raw.decode("cp1252", "replace") if compressed else raw.decode("utf-16-le", "replace"))
    return "".join(parts)


def _shown(text: str) -> str:
    """A note's text as one line: field codes left out (their results kept), marks dropped."""
    if "\x13" in text:
        kept: list[str] = []
        fields: list[bool] = []  # the open fields, innermost last: True while its code is read
        in_code = 0  # how many of them are: a counter, as fields nest as deep as a forged file likes
        for token in _FIELD_MARK.split(text):
            if token == "\x13":
                fields.append(True)
                in_code += 1
            elif token == "\x14":
                if fields and fields[-1]:
                    fields[-1] = False
                    in_code -= 1
            elif token == "\x15":
                if fields and fields.pop():
                    in_code -= 1
            elif not in_code:
                kept.append(token)
        text = "".join(kept)
    return " ".join(line.strip() for line in text.translate(WORD_MARKS).splitlines() if line.strip())


def _notes(
    word: bytes,
    table: bytes,
    pieces: list[tuple[int, int, int, bool]],
    plc: tuple[int, int],
    start: int,
    length: int,
    prefix: str,
) -> list[str]:
    """One subdocument's notes: the PlcffndTxt/PlcfendTxt CPs (MS-DOC 2.8.18/2.8.13) start each note's
    text, relative to the subdocument; the last range is its closing paragraph mark."""
    fc, lcb = plc
    cps = _u32s(table, fc, lcb // 4)
    text = _text(word, pieces, start, start + length)
    blocks: list[str] = []
    for number, (first, after) in enumerate(pairwise(cps), start=1):
        if not first < after <= length:
            raise _Damaged(f"note {number} is not inside its subdocument")
        if shown := _shown(text[first:after]):
            blocks.append(f"[^{prefix}{number}]: {shown}")
    return blocks


def _notes_table(word: bytes) -> str | None:
    """The table stream's name when the FIB counts footnotes or endnotes (most files: none), else None."""
    try:
        one_table, lw, _fc_lcb = _fib(word)
    except (_Damaged, struct.error):
        return None
    if not (lw[_CCP_FTN] or lw[_CCP_EDN]):
        return None
    return "1Table" if one_table else "0Table"


def doc_notes(data: bytes) -> list[str]:
    """The .doc file's footnotes, then its endnotes, as Markdown footnotes; [] when it has none (the FIB's
    counts say so before the table stream is read) or when the streams do not add up."""
    try:
        import olefile
    except ImportError:
        return []
    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:  # bytes under 1,536 would be a path
            word = ole.openstream("WordDocument").read()
            table_name = _notes_table(word)
            if table_name is None or not ole.exists(table_name):
                return []
            table = ole.openstream(table_name).read()
    except (OSError, ValueError, struct.error):  # olefile's errors for a damaged container
        return []
    return notes_from_streams(word, table)


def notes_from_streams(word: bytes, table: bytes) -> list[str]:
    """The notes from the WordDocument stream and its table stream; [] where they do not add up (the
    footnotes or the endnotes alone when only the other's list is damaged)."""
    try:
        _one_table, lw, fc_lcb = _fib(word)
        main, footnotes, endnotes = lw[_CCP_TEXT], lw[_CCP_FTN], lw[_CCP_EDN]
        # every character asked for comes from the stream: a forged count cannot ask for more
        if footnotes + endnotes > len(word):
            return []
        pieces = _pieces(table, *_pair(fc_lcb, _CLX))
    except (_Damaged, struct.error):
        return []
    endnotes_start = main + footnotes + lw[_CCP_HDD] + lw[_CCP_MCR] + lw[_CCP_ATN]
    blocks: list[str] = []
    for plc, start, length, prefix in (
        (_PLCF_FND_TXT, main, footnotes, ""),
        (_PLCF_END_TXT, endnotes_start, endnotes, "e"),
    ):
        if length:
            try:
                blocks += _notes(word, table, pieces, _pair(fc_lcb, plc), start, length, prefix)
            except (_Damaged, struct.error):
                continue
    return blocks
