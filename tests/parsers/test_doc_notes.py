"""A Word 97-2003 file's footnotes and endnotes (chalicelib/parsers/doc_notes.py) after unword's body, as the
.docx reader writes them; damaged streams give the body alone (or LibreOffice's turn), never an error. The
fixtures are made by tests/fixtures/doc/make_fixtures.py."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from parser_helpers import corpus_bytes

from chalicelib.ports import ReadRequest

unword = pytest.importorskip("unword")
olefile = pytest.importorskip("olefile")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "doc"
BODY = (
    "Rivers of the north carry meltwater to the sea. The delta is wide.\n\n"
    "Glaciers retreat each summer. Survey teams measure them.\n\n"
    "The end of the report."
)
NOTES = [
    "[^1]: Meltwater peaks in June (the gauge records).",
    "[^2]: Über die Gletscher: “retreat” measured in metres.",
    "[^e1]: Survey data from the 2019 field season. Its second paragraph.",
]
CORPUS_DOCS = (
    "debian-faq-basic-defs.ko.doc",
    "debian-faq-ftparchives.doc",
    "debian-reference-ch02.doc",
    "python-howto-logging.doc",
    "python-howto-regex.doc",
)


def _streams(data: bytes) -> tuple[bytes, bytes]:
    with olefile.OleFileIO(data) as ole:
        return ole.openstream("WordDocument").read(), ole.openstream("1Table").read()


def _fc_lcb_at(word: bytes, index: int) -> int:
    """Where FibRgFcLcb97's pair `index` is in the FIB (after FibBase, FibRgW97 and FibRgLw97)."""
    pos = 34 + 2 * struct.unpack_from("<H", word, 32)[0]
    pos += 2 + 4 * struct.unpack_from("<H", word, pos)[0]
    return pos + 2 + 8 * index


def _native(data: bytes):
    from chalicelib.parsers.office import read_doc_natively

    return read_doc_natively(ReadRequest(data=data, file_name="notes.doc", file_type="doc", options={}))


def test_doc_footnotes_and_endnotes_come_after_the_body_as_markdown_footnotes(read) -> None:
    """Two footnotes (one with a hyperlink field: its result kept, its code not) and an endnote of two
    paragraphs, numbered as the .docx reader numbers them: [^1], [^2], [^e1]."""
    result = read("notes.doc", data=(FIXTURES / "notes.doc").read_bytes())
    assert result.metadata["read_by"] == "unword"
    assert result.markdown == BODY + "\n\n" + "\n\n".join(NOTES) + "\n"
    assert "HYPERLINK" not in result.markdown


def test_damaged_footnote_list_keeps_the_body_and_the_endnotes(tmp_path) -> None:
    """The FIB's PlcffndTxt pointing past the table stream (unword does not read it): the body as before and
    the endnote; the footnotes are left out."""
    path = tmp_path / "notes.doc"
    path.write_bytes((FIXTURES / "notes.doc").read_bytes())
    word, table = _streams(path.read_bytes())
    damaged = bytearray(word)
    struct.pack_into("<I", damaged, _fc_lcb_at(word, 3), len(table) - 4)  # fcPlcffndTxt: its lcb runs past
    with olefile.OleFileIO(str(path), write_mode=True) as ole:
        ole.write_stream("WordDocument", bytes(damaged))
    result = _native(path.read_bytes())
    assert result is not None
    assert result.markdown == BODY + "\n\n" + NOTES[2] + "\n"


def _with_pieces(word: bytes, table: bytes, pieces: list[tuple[int, int, str]]) -> tuple[bytes, bytes]:
    """The streams with the text laid out again in `pieces` (first CP, CP after, "cp1252" or "utf-16-le"),
    each piece's bytes appended to the WordDocument stream and a new Clx appended to the table stream."""
    from chalicelib.parsers import doc_notes

    _one, _lw, fc_lcb = doc_notes._fib(word)
    old = doc_notes._pieces(table, *doc_notes._pair(fc_lcb, doc_notes._CLX))
    text = doc_notes._text(word, old, 0, old[-1][1])
    new_word = bytearray(word)
    cps: list[int] = []
    pcds = b""
    for first, after, encoding in pieces:
        compressed = encoding == "cp1252"
        fc = len(new_word) * 2 | 0x40000000 if compressed else len(new_word)
        new_word += text[first:after].encode(encoding)
        cps.append(first)
        pcds += struct.pack("<HIH", 0, fc, 0)
    cps.append(pieces[-1][1])
    plc = struct.pack(f"<{len(cps)}I", *cps) + pcds
    clx = b"\x01" + struct.pack("<h", 3) + b"\x00\x00\x00" + b"\x02" + struct.pack("<I", len(plc)) + plc
    struct.pack_into("<II", new_word, _fc_lcb_at(word, 33), len(table), len(clx))
    return bytes(new_word), table + clx


def test_notes_in_8bit_pieces_and_across_a_piece_boundary() -> None:
    """Word writes cp1252 ("compressed") pieces for text that fits: one such piece for everything, then a
    UTF-16 piece that ends inside the first footnote and a cp1252 piece for the rest, after a Prc."""
    from chalicelib.parsers.doc_notes import notes_from_streams

    word, table = _streams((FIXTURES / "notes.doc").read_bytes())
    assert notes_from_streams(word, table) == NOTES
    total = 150 + 143 + 65 + 1  # ccpText + ccpFtn + ccpEdn and the last paragraph mark
    assert notes_from_streams(*_with_pieces(word, table, [(0, total, "cp1252")])) == NOTES
    split = [(0, 160, "utf-16-le"), (160, total, "cp1252")]
    assert notes_from_streams(*_with_pieces(word, table, split)) == NOTES


def test_forged_counts_and_piece_tables_give_no_notes() -> None:
    from chalicelib.parsers.doc_notes import notes_from_streams

    word, table = _streams((FIXTURES / "notes.doc").read_bytes())
    huge = bytearray(word)
    lw = 34 + 2 * struct.unpack_from("<H", word, 32)[0] + 2
    struct.pack_into("<I", huge, lw + 4 * 4, 0xFFFFFFFF)  # ccpFtn
    assert notes_from_streams(bytes(huge), table) == []
    # a Prc whose size is negative steps back onto itself: refused, not a loop
    looping = bytearray(word)
    struct.pack_into("<II", looping, _fc_lcb_at(word, 33), len(table), 6)
    assert notes_from_streams(bytes(looping), table + b"\x01" + struct.pack("<h", -3) + b"\x00\x00\x00") == []
    # overlapping pieces (CPs not ascending) would repeat their bytes: refused
    overlapping = _with_pieces(word, table, [(0, 300, "utf-16-le"), (0, 359, "utf-16-le")])
    assert notes_from_streams(*overlapping) == []


@pytest.mark.parametrize("name", ["notes-table-cut.doc", "notes-piece-past.doc"])
def test_damaged_fixtures_do_not_raise(name: str) -> None:
    """A table stream cut inside the piece table, a piece past the WordDocument stream: unword refuses both
    (LibreOffice's turn) and the notes reader finds nothing, neither raises."""
    from chalicelib.parsers.doc_notes import doc_notes

    data = (FIXTURES / name).read_bytes()
    assert doc_notes(data) == []
    assert _native(data) is None


def test_cut_and_flipped_streams_give_notes_or_none_never_an_error() -> None:
    from chalicelib.parsers.doc_notes import doc_notes, notes_from_streams

    data = (FIXTURES / "notes.doc").read_bytes()
    word, table = _streams(data)
    for cut in range(0, len(table) + 1, 7):
        assert isinstance(notes_from_streams(word, table[:cut]), list)
    for cut in range(0, len(word) + 1, 7):
        assert isinstance(notes_from_streams(word[:cut], table), list)
    rng = random.Random(47)
    outcomes = {"notes": 0, "none": 0}
    for _ in range(300):
        damaged_word, damaged_table = bytearray(word), bytearray(table)
        for _flip in range(rng.randint(1, 8)):
            target = damaged_word if rng.random() < 0.5 else damaged_table
            limit = 1024 if target is damaged_word else len(target)  # the FIB, or anywhere in the table
            target[rng.randrange(limit)] = rng.randrange(256)
        notes = notes_from_streams(bytes(damaged_word), bytes(damaged_table))
        assert all(isinstance(block, str) for block in notes)
        outcomes["notes" if notes else "none"] += 1
    assert outcomes["notes"] > 0 and outcomes["none"] > 0, outcomes
    for cut in range(512, len(data), 512):  # the container cut anywhere: olefile's errors are caught
        assert isinstance(doc_notes(data[:cut]), list)


@pytest.mark.parametrize("name", CORPUS_DOCS)
def test_corpus_docs_have_no_notes_and_read_as_before(name: str) -> None:
    """The corpus's .doc files have no notes (ccpFtn, ccpEdn 0): their Markdown is unword's body and text
    boxes as before this reader."""
    from chalicelib.parsers.doc_notes import WORD_MARKS, doc_notes

    data = corpus_bytes(name)
    assert doc_notes(data) == []
    document = unword.parse_doc(data)
    parts = [document.body_text.translate(WORD_MARKS).strip()]
    parts += [box.translate(WORD_MARKS).strip() for box in document.textboxes]
    result = _native(data)
    assert result is not None
    assert result.markdown == "\n\n".join(part for part in parts if part) + "\n"
