"""Files that programs commonly save under another format's name are read as what they are: HTML (Excel's
and reporting tools' "export to .xls", Word's web page) and MHTML named .xls/.doc as HTML, RTF named .doc
through LibreOffice. An OpenDocument package named .docx is refused with a message that says so, not as a
damaged EPUB."""

from __future__ import annotations

import io
import zipfile

import pytest

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.parsers import engines
from chalicelib.parsers.base import resolve_file_type

EXCEL_HTML = (
    b'<html xmlns:o="urn:schemas-microsoft-com:office:office" '
    b'xmlns:x="urn:schemas-microsoft-com:office:excel">\r\n<head><meta charset="utf-8"></head><body>'
    b"<table><tr><td>Region</td><td>Total</td></tr><tr><td>North</td><td>42</td></tr></table></body></html>"
)
RTF = rb"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard Quarterly RTF report body.\par}"


def _refused(read, name: str, data: bytes) -> PermanentStageError:
    with pytest.raises(PermanentStageError) as caught:
        read(name, data=data)
    return caught.value


def test_an_html_table_named_xls_is_read_as_html(read) -> None:
    result = read("export.xls", data=EXCEL_HTML)
    assert "| Region | Total |" in result.markdown
    assert "| North | 42 |" in result.markdown
    assert result.metadata["file_type"] == "html"
    assert result.metadata["declared_file_type"] == "xls"


def test_utf16_html_named_xls_and_html_named_doc_are_read(read) -> None:
    utf16 = "\ufeff<table><tr><td>Größe</td><td>7</td></tr></table>".encode("utf-16-le")
    assert "| Größe | 7 |" in read("unicode.xls", data=utf16).markdown
    page = b"<!DOCTYPE html><html><body><h1>Minutes</h1><p>Word web page saved as doc.</p></body></html>"
    result = read("minutes.doc", data=page)
    assert "Word web page saved as doc." in result.markdown
    assert result.metadata["file_type"] == "html"


def test_mhtml_named_doc_is_read_as_mhtml(read) -> None:
    mhtml = (
        b"MIME-Version: 1.0\r\n"
        b'Content-Type: multipart/related; boundary="----=_NextPart"\r\n\r\n'
        b"------=_NextPart\r\nContent-Type: text/html; charset=utf-8\r\n"
        b"Content-Location: file:///C:/report.htm\r\n\r\n"
        b"<html><body><p>Single file web page body.</p></body></html>\r\n"
        b"------=_NextPart--\r\n"
    )
    result = read("report.doc", data=mhtml)
    assert "Single file web page body." in result.markdown
    assert result.metadata["file_type"] == "mhtml"


def test_text_that_is_not_markup_named_xls_or_doc_is_still_refused(read) -> None:
    for name, data in (
        ("table.xls", b"a,b\n1,2\n"),
        ("notes.doc", b"just some words, not a document"),
        (
            "sheet.xls",
            b'<?xml version="1.0"?><Workbook xmlns="urn:schemas-microsoft-com:office:spreadsheet">'
            b"<Worksheet><Table><Row><Cell><Data>1</Data></Cell></Row></Table></Worksheet></Workbook>",
        ),
        ("page.docx", b"<html><body><p>x</p></body></html>"),  # only the legacy names: OOXML is not HTML
        ("rtf.xls", RTF),
    ):
        error = _refused(read, name, data)
        assert error.code == SpanErrorCode.UNSUPPORTED_TYPE, name
        assert "rename it" in str(error)


@pytest.mark.requires_libreoffice
def test_rtf_named_doc_is_read_through_libreoffice(read) -> None:
    result = read("report.doc", data=RTF)
    assert "Quarterly RTF report body." in result.markdown
    assert result.metadata["converted_by"] == "libreoffice"
    assert result.metadata["content_type"] == "rtf"


def test_rtf_named_doc_without_libreoffice_says_rtf_needs_it(read, monkeypatch) -> None:
    monkeypatch.setattr(engines, "soffice_path", lambda: None)
    error = _refused(read, "report.doc", RTF)
    assert error.code == SpanErrorCode.UNSUPPORTED_TYPE
    assert "RTF (Rich Text Format)" in str(error) and "LibreOffice" in str(error)


def _package(mimetype: str, *members: str) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("mimetype", mimetype)
        for name in members:
            zf.writestr(name, "<x/>")
    return out.getvalue()


def test_an_opendocument_named_docx_is_refused_for_what_it_is(read) -> None:
    odt = _package("application/vnd.oasis.opendocument.text", "content.xml", "META-INF/manifest.xml")
    error = _refused(read, "letter.docx", odt)
    assert error.code == SpanErrorCode.UNSUPPORTED_TYPE
    assert "OpenDocument text file" in str(error) and "EPUB file is damaged" not in str(error)
    ods = _package("application/vnd.oasis.opendocument.spreadsheet", "content.xml")
    assert "OpenDocument spreadsheet file" in str(_refused(read, "sheet.xlsx", ods))
    assert "save it as .xlsx" in str(_refused(read, "sheet.xlsx", ods))


def test_an_epub_named_docx_is_still_an_epub() -> None:
    epub = _package("application/epub+zip", "META-INF/container.xml")
    assert resolve_file_type(epub, "docx") == "epub"
    assert resolve_file_type(epub, "epub") == "epub"
