"""Legacy Office files read without LibreOffice: .doc with unword (a Rust reader), .ppt from its records
(chalicelib/parsers/ppt.py, olefile), LibreOffice only for what they cannot read. Skips where unword or olefile
is not installed."""

from __future__ import annotations

import re
import sys

import pytest
from parser_helpers import corpus_bytes

from chalicelib.domain.errors import PermanentStageError

unword = pytest.importorskip("unword")
olefile = pytest.importorskip("olefile")


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"\w+", text)}


def test_doc_is_read_by_unword_with_headings(read) -> None:
    result = read("python-howto-logging.doc")
    assert result.metadata["read_by"] == "unword"
    assert "converted_by" not in result.metadata
    assert result.title == "Logging HOWTO"
    headings = [line for line in result.markdown.splitlines() if line.startswith("#")]
    assert "# Basic Logging Tutorial" in headings
    assert "## When to use logging" in headings


def test_korean_doc_keeps_its_text(read) -> None:
    result = read("debian-faq-basic-defs.ko.doc")
    assert result.metadata["read_by"] == "unword"
    assert "데비안" in result.markdown


def test_doc_text_matches_its_docx_twin(read) -> None:
    """The corpus's .docx of the same chapter: unword's words cover nearly all of it."""
    doc = _words(read("python-howto-regex.doc").markdown)
    docx = _words(read("python-howto-regex.docx").markdown)
    assert len(doc & docx) / len(docx) > 0.97


def test_a_file_unword_cannot_read_goes_to_libreoffice(read, monkeypatch) -> None:
    from chalicelib.parsers import office

    calls: list[int] = []

    def convert(data: bytes, source_type: str, timeout: float) -> bytes:
        calls.append(len(data))
        raise office.unsupported("LibreOffice stand-in")

    monkeypatch.setattr("chalicelib.parsers.engines.convert_with_libreoffice", convert)
    # an OLE container without a WordDocument stream (an Excel 97 file named .doc): unword refuses it
    data = corpus_bytes("vega-us-employment.xls")
    with pytest.raises(PermanentStageError):
        read("sheet.doc", data=data)
    assert calls == [len(data)]
    monkeypatch.setitem(sys.modules, "unword", None)  # not installed: every doc goes to LibreOffice
    with pytest.raises(PermanentStageError):
        read("python-howto-regex.doc")
    assert len(calls) == 2


def test_ppt_is_read_from_its_records_with_titles_and_every_slide(read) -> None:
    result = read("python-howto-sorting.ppt")
    assert result.metadata["read_by"] == "ppt-records"
    assert result.metadata["slides"] == 18
    assert result.title == "Sorting HOW TO"
    assert result.markdown.startswith("<!-- Slide number: 1 -->\n\n# Sorting HOW TO\n\nAndrew Dalke")
    assert "<!-- Slide number: 18 -->" in result.markdown


def test_korean_ppt_text_and_its_pptx_twin(read) -> None:
    ppt = read("debian-faq-choosing.ko.ppt")
    assert ppt.metadata["read_by"] == "ppt-records"
    assert "데비안" in ppt.markdown
    pptx = read("debian-faq-choosing.ko.pptx")
    assert len(_words(ppt.markdown) & _words(pptx.markdown)) / len(_words(pptx.markdown)) > 0.97


@pytest.mark.requires_libreoffice
def test_speaker_notes_of_a_ppt_come_after_their_slide(tmp_path) -> None:
    """LibreOffice saves the corpus's notes .pptx as .ppt; the record reader finds the notes page."""
    import subprocess

    from chalicelib.parsers.libreoffice import soffice_path
    from chalicelib.parsers.ppt import read_ppt_natively

    (tmp_path / "notes.pptx").write_bytes(corpus_bytes("python-pptx-notes.pptx"))
    subprocess.run(
        [
            str(soffice_path()),
            f"-env:UserInstallation=file://{tmp_path}/profile",
            "--headless",
            "--convert-to",
            "ppt",
            "--outdir",
            str(tmp_path),
            str(tmp_path / "notes.pptx"),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    result = read_ppt_natively((tmp_path / "notes.ppt").read_bytes())
    assert result is not None
    assert result.markdown == "<!-- Slide number: 1 -->\n\n### Notes:\nNotes\n"


def test_a_ppt_the_records_do_not_explain_goes_to_libreoffice(read, monkeypatch) -> None:
    from chalicelib.parsers import office
    from chalicelib.parsers.ppt import read_ppt_natively

    data = corpus_bytes("python-howto-sorting.ppt")
    stream_cut = bytearray(data)
    # the "Current User" record's header token: an encrypted file's, which this reader leaves to LibreOffice
    at = bytes(stream_cut).find(b"\x5f\xc0\x91\xe3")
    assert at > 0
    stream_cut[at : at + 4] = b"\xdf\xc4\xd1\xf3"
    assert read_ppt_natively(bytes(stream_cut)) is None
    assert read_ppt_natively(data[: len(data) // 2]) is None  # truncated
    calls: list[int] = []

    def convert(data: bytes, source_type: str, timeout: float) -> bytes:
        calls.append(len(data))
        raise office.unsupported("LibreOffice stand-in")

    monkeypatch.setattr("chalicelib.parsers.engines.convert_with_libreoffice", convert)
    with pytest.raises(PermanentStageError):
        read("locked.ppt", data=bytes(stream_cut))
    assert calls == [len(data)]


def test_damaged_ppt_streams_give_a_result_or_none_never_an_error() -> None:
    """Bytes flipped and the record stream cut anywhere: the reader returns text or None (then LibreOffice's
    turn), it does not raise."""
    import random

    from chalicelib.parsers.ppt import read_ppt_streams

    with olefile.OleFileIO(corpus_bytes("commander-readme.ppt")) as ole:
        stream = ole.openstream("PowerPoint Document").read()
        current_user = ole.openstream("Current User").read()
    assert read_ppt_streams(stream, current_user) is not None
    rng = random.Random(27)
    outcomes = {"text": 0, "none": 0}
    for _ in range(300):
        damaged = bytearray(stream)
        for _flip in range(rng.randint(1, 20)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cut = len(damaged) if rng.random() < 0.7 else rng.randrange(len(damaged))
        result = read_ppt_streams(bytes(damaged[:cut]), current_user)
        outcomes["none" if result is None else "text"] += 1
    assert outcomes["text"] > 0 and outcomes["none"] > 0, outcomes
