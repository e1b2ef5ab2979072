"""doc/ppt through a headless LibreOffice (3-5 s per file), as for the files that unword or the .ppt record
reader cannot read. In the default suite, not `slow`: CI installs LibreOffice and must exercise the conversion
(about 12 s for the three); without it they skip."""

import sys

import pytest

pytestmark = pytest.mark.requires_libreoffice


def test_doc_converted_and_parsed(read, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "unword", None)  # LibreOffice reads what unword cannot (or without it)
    result = read("python-howto-logging.doc")
    assert result.metadata["converted_by"] == "libreoffice"
    assert "logging" in result.markdown.lower()
    assert result.markdown.count("#") > 3


def test_korean_ppt(read, monkeypatch) -> None:
    monkeypatch.setattr("chalicelib.parsers.engines.read_ppt_natively", lambda data, check: None)
    result = read("debian-faq-choosing.ko.ppt")
    assert "<!-- Slide number: 7 -->" in result.markdown
    assert "데비안" in result.markdown


def test_ole_doc_named_docx_is_rerouted(read, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "unword", None)
    from parser_helpers import corpus_bytes

    result = read("mislabelled.docx", data=corpus_bytes("debian-faq-ftparchives.doc"))
    assert result.metadata["file_type"] == "doc"
    assert result.markdown.strip()
