"""Legacy Office files read without LibreOffice: .doc with unword (a Rust reader), LibreOffice only for what
it cannot read. Skips where unword is not installed."""

from __future__ import annotations

import re
import sys

import pytest
from parser_helpers import corpus_bytes

from chalicelib.domain.errors import PermanentStageError

unword = pytest.importorskip("unword")


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
