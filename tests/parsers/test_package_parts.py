"""The reader's preflight inflates every part of a docx/pptx once and hands the XML parts and images to
the engine (ParseContext.package_parts), which then never opens the zip: the Markdown and images are those
read from the zip, and members nothing reads (fonts, media, embedded files) are not kept in memory."""

from __future__ import annotations

import io
import zipfile

import pytest
from project_paths import corpus_bytes

from chalicelib.parsers.base import Limits, ParseContext
from chalicelib.parsers.guards import preflight
from chalicelib.parsers.office import parse_docx
from chalicelib.parsers.slides import parse_pptx
from chalicelib.ports import ReadRequest

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def test_preflight_keeps_xml_parts_and_images_only() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("word/document.xml", "<w:document xmlns:w='urn:w'/>")
        zf.writestr("word/media/image1.png", PNG)
        zf.writestr("word/media/tiny.gif", b"GIF89a")  # shorter than the bytes an image is told by
        zf.writestr("word/fonts/font1.odttf", b"\x00\x01" * 5000)
        zf.writestr("word/embeddings/oleObject1.bin", b"")
    parts: dict[str, bytes] = {}
    measured = preflight(out.getvalue(), "docx", Limits(), parts)
    assert sorted(parts) == [
        "[Content_Types].xml",
        "word/document.xml",
        "word/media/image1.png",
        "word/media/tiny.gif",
    ]
    assert parts["word/media/image1.png"] == PNG
    assert measured["uncompressed_bytes"] == 8 + 29 + len(PNG) + 6 + 10_000
    xlsx: dict[str, bytes] = {}
    preflight(corpus_bytes("statsmodels-statecrime.xlsx"), "xlsx", Limits(), xlsx)
    assert xlsx == {}  # calamine reads the workbook itself


@pytest.mark.parametrize(
    ("name", "parse"),
    [
        ("python-howto-logging.docx", parse_docx),
        ("python-docx-having-images.docx", parse_docx),
        ("python-pptx-placeholders.pptx", parse_pptx),
        ("commander-readme.pptx", parse_pptx),
    ],
)
def test_a_reader_given_the_parts_reads_what_it_reads_from_the_zip(name: str, parse: object) -> None:
    data = corpus_bytes(name)
    request = ReadRequest(data=data, file_name=name, file_type=name.rsplit(".", 1)[1])
    parts: dict[str, bytes] = {}
    preflight(data, request.file_type, Limits(), parts)
    from_parts = parse(request, ParseContext(package_parts=parts))  # type: ignore[operator]
    from_zip = parse(request, ParseContext())  # type: ignore[operator]
    assert from_parts.markdown == from_zip.markdown and from_parts.markdown
    assert [(i.ref, i.data) for i in from_parts.images] == [(i.ref, i.data) for i in from_zip.images]
