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
    parts: dict[str, bytes | None] = {}
    measured = preflight(out.getvalue(), "docx", Limits(), parts)
    assert sorted(name for name, kept in parts.items() if kept is not None) == [
        "[Content_Types].xml",
        "word/document.xml",
        "word/media/image1.png",
        "word/media/tiny.gif",
    ]
    assert parts["word/media/image1.png"] == PNG
    assert parts["word/fonts/font1.odttf"] is None and parts["word/embeddings/oleObject1.bin"] is None
    assert measured["uncompressed_bytes"] == 8 + 29 + len(PNG) + 6 + 10_000
    xlsx: dict[str, bytes | None] = {}
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
    parts: dict[str, bytes | None] = {}
    preflight(data, request.file_type, Limits(), parts)
    from_parts = parse(request, ParseContext(package_parts=parts))  # type: ignore[operator]
    from_zip = parse(request, ParseContext())  # type: ignore[operator]
    assert from_parts.markdown == from_zip.markdown and from_parts.markdown
    assert [(i.ref, i.data) for i in from_parts.images] == [(i.ref, i.data) for i in from_zip.images]


def test_a_part_not_named_as_xml_is_read_from_the_zip() -> None:
    """OPC names parts freely: a styles part without the .xml suffix is not kept by the preflight (nor
    scanned by it: the engine's parser resolves no entity), and the reader reads it from the zip, so the
    heading style still makes a heading."""
    import docx

    from chalicelib.parsers import build_docreader

    document = docx.Document()
    document.add_heading("Renamed part", level=1)
    document.add_paragraph("body text")
    saved = io.BytesIO()
    document.save(saved)
    renamed = io.BytesIO()
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(renamed, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename in ("word/_rels/document.xml.rels", "[Content_Types].xml"):
                data = data.replace(b"styles.xml", b"styles.part")
            dst.writestr(info.filename.replace("word/styles.xml", "word/styles.part"), data)
    parts: dict[str, bytes | None] = {}
    preflight(renamed.getvalue(), "docx", Limits(), parts)
    assert parts["word/styles.part"] is None
    request = ReadRequest(data=renamed.getvalue(), file_name="r.docx", file_type="docx")
    assert build_docreader().read(request).markdown == "# Renamed part\n\nbody text\n"


def test_a_read_lists_the_zip_once_and_the_listing_it_hands_over_is_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The type check reads the central directory and hands it to the preflight, which checks the declared
    sizes on it as on its own reading (a listing handed over is no way around the caps)."""
    from chalicelib.parsers import build_docreader
    from chalicelib.parsers.base import resolve_file_type
    from chalicelib.parsers.guards import check_zip

    data = corpus_bytes("python-howto-logging.docx")
    readings = 0
    real = zipfile.ZipFile._RealGetContents

    def counted(self: zipfile.ZipFile) -> None:
        nonlocal readings
        readings += 1
        real(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", counted)
    result = build_docreader().read(ReadRequest(data=data, file_name="l.docx", file_type="docx"))
    assert readings == 1 and result.markdown
    monkeypatch.undo()

    listing: list[zipfile.ZipInfo] = []
    assert resolve_file_type(data, "docx", listing) == "docx"
    assert [i.filename for i in listing] == zipfile.ZipFile(io.BytesIO(data)).namelist()
    few = Limits(zip_max_members=len(listing) - 1)
    with pytest.raises(Exception, match="too many parts"):
        preflight(data, "docx", few, {}, listing)
    small = Limits(zip_max_total_uncompressed=sum(i.file_size for i in listing) - 1)
    with pytest.raises(Exception, match="zip bomb"):
        check_zip(data, small, "Word", listing=listing)
