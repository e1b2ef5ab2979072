"""Hostile and broken input: every case ends in a PermanentStageError a user can act on, never a crash,
a hang or unbounded memory."""

import io
import json
import subprocess
import sys
import textwrap
import zipfile

import pytest
from parser_helpers import DATA, corpus_bytes

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.parsers.base import resolve_file_type

PARSE_FAILED = SpanErrorCode.DOCREADER_PARSE_FAILED
UNSUPPORTED = SpanErrorCode.UNSUPPORTED_TYPE


def fails(read, name: str, data: bytes, code: SpanErrorCode, match: str = "", **options) -> str:
    with pytest.raises(PermanentStageError) as err:
        read(name, data=data, **options)
    assert err.value.code == code, err.value.message
    assert err.value.permanent
    if match:
        assert match.lower() in err.value.message.lower(), err.value.message
    return err.value.message


def docx_with(document_xml: bytes, extra: dict[str, bytes] | None = None, level: int = 6) -> bytes:
    """A minimal .docx built from a real one with word/document.xml replaced."""
    src = zipfile.ZipFile(io.BytesIO(corpus_bytes("python-howto-sorting.docx")))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as zf:
        for info in src.infolist():
            if info.filename != "word/document.xml":
                zf.writestr(info.filename, src.read(info.filename))
        zf.writestr("word/document.xml", document_xml)
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(
    "name", ["a.pdf", "a.docx", "a.xlsx", "a.pptx", "a.epub", "a.html", "a.csv", "a.png"]
)
def test_empty_files(read, name: str) -> None:
    fails(read, name, b"", PARSE_FAILED, "empty")


def test_empty_txt_from_corpus(read) -> None:
    fails(read, "empty.txt", corpus_bytes("empty.txt"), PARSE_FAILED, "empty")


def test_whitespace_only_text_has_nothing_to_index(read) -> None:
    fails(read, "blank.txt", b"  \n\n \t\n", PARSE_FAILED, "no text")


def test_truncated_pdf_from_corpus(read) -> None:
    fails(read, "amsmath.truncated.pdf", corpus_bytes("amsmath.truncated.pdf"), PARSE_FAILED, "damaged")


def test_truncated_office_files(read) -> None:
    for name in ("python-howto-sorting.docx", "commander-readme.pptx", "vega-us-employment.xlsx"):
        data = corpus_bytes(name)
        fails(read, name, data[: len(data) // 2], PARSE_FAILED, "damaged")


def test_truncated_epub(read) -> None:
    data = corpus_bytes("python-howto-sorting.epub")
    fails(read, "x.epub", data[: len(data) // 3], PARSE_FAILED)


def test_encrypted_pdf(read) -> None:
    # Fixture: page 1 of the corpus' screenplay-example.pdf, AES-128 encrypted by pypdf, user password s3cret.
    data = (DATA / "encrypted-user-password.pdf").read_bytes()
    fails(read, "secret.pdf", data, PARSE_FAILED, "password")
    opened = read("secret.pdf", data=data, pdf_password="s3cret")  # with the password it parses
    assert opened.metadata["pages"] == 1


@pytest.mark.parametrize(
    ("name", "data", "words"),
    [
        ("report.pdf", b"<html><body>not a pdf</body></html>", "plain text"),
        ("report.docx", b"%PDF-1.4\n%fake", "a PDF"),
        ("photo.png", b"just some text pretending", "plain text"),
        ("photo.jpg", b"%PDF-1.7 nope", "a PDF"),
        ("song.mp3", b"lyrics only, no audio here", "does not contain audio"),
        ("sheet.xlsx", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "an image"),
        ("notes.txt", b"%PDF-1.4\n" + b"\x00\x01" * 100, "a PDF"),
        ("data.csv", b"PK\x03\x04" + b"\x00" * 64, "ZIP"),
    ],
)
def test_extension_lying_about_content(read, name: str, data: bytes, words: str) -> None:
    fails(read, name, data, UNSUPPORTED, words)


def test_binary_named_txt(read) -> None:
    fails(read, "bin.txt", bytes(range(256)) * 20, UNSUPPORTED)


def test_misnamed_office_files_are_rerouted() -> None:
    assert resolve_file_type(corpus_bytes("python-howto-logging.doc"), "docx") == "doc"  # OLE named .docx
    assert resolve_file_type(corpus_bytes("vega-us-employment.xlsx"), "docx") == "xlsx"
    assert resolve_file_type(corpus_bytes("commander-readme.pptx"), "ppt") == "pptx"


def test_xlsx_named_docx_parses_as_spreadsheet(read) -> None:
    result = read("employment.docx", data=corpus_bytes("vega-us-employment.xlsx"))
    assert result.metadata["file_type"] == "xlsx"
    assert result.metadata["declared_file_type"] == "docx"


def test_unknown_type(read) -> None:
    fails(read, "setup.exe", b"MZ\x90\x00", UNSUPPORTED, "cannot be imported")


def test_zip_bomb_by_ratio(read) -> None:
    bomb = docx_with(b"<w:document/>", extra={"word/media/bomb.bin": b"\x00" * (20 * 1024 * 1024)}, level=9)
    assert len(bomb) < 200_000
    fails(read, "bomb.docx", bomb, PARSE_FAILED, "zip bomb")


def test_zip_bomb_by_total_size(read) -> None:
    parts = {f"word/media/p{i}.bin": bytes(range(256)) * 4096 for i in range(8)}  # 8 MB, low ratio
    data = docx_with(b"<w:document/>", extra=parts, level=1)
    fails(
        read,
        "big.docx",
        data,
        PARSE_FAILED,
        "zip bomb",
        limits={"zip_max_total_uncompressed": 4 * 1024 * 1024},
    )


def test_zip_member_count(read) -> None:
    parts = {f"word/media/{i}.bin": b"x" for i in range(50)}
    fails(
        read,
        "many.docx",
        docx_with(b"<w:document/>", extra=parts),
        PARSE_FAILED,
        "too many parts",
        limits={"zip_max_members": 40},
    )


BILLION_LAUGHS = textwrap.dedent(
    """<?xml version="1.0"?>
    <!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
    <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
    <w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r>
    <w:t>&lol3;</w:t></w:r></w:p></w:body></w:document>"""
).encode()

XXE = textwrap.dedent(
    """<?xml version="1.0"?>
    <!DOCTYPE c [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
    <container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>
    <rootfile full-path="&xxe;" media-type="application/oebps-package+xml"/></rootfiles></container>"""
).encode()


def test_xml_entity_expansion_in_docx(read) -> None:
    fails(read, "lol.docx", docx_with(BILLION_LAUGHS), PARSE_FAILED, "entity")


def test_xxe_in_epub(read) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("mimetype", "application/epub+zip")
        zf.writestr("META-INF/container.xml", XXE)
    fails(read, "xxe.epub", out.getvalue(), PARSE_FAILED, "entity")


def test_xxe_deeper_than_the_prescan_is_still_refused(read) -> None:
    padding = b"<!-- " + b"x" * 9000 + b" -->"
    container = XXE.replace(b'<?xml version="1.0"?>', b'<?xml version="1.0"?>' + padding)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("mimetype", "application/epub+zip")
        zf.writestr("META-INF/container.xml", container)
    fails(read, "xxe.epub", out.getvalue(), PARSE_FAILED)  # defusedxml refuses the DTD


def test_huge_sheet_cell_cap(read) -> None:
    fails(
        read,
        "statsmodels-randhie.xlsx",
        corpus_bytes("statsmodels-randhie.xlsx"),
        PARSE_FAILED,
        "cells",
        limits={"max_sheet_cells": 10_000},
    )
    fails(
        read,
        "fair.csv",
        corpus_bytes("statsmodels-fair.csv"),
        PARSE_FAILED,
        "cells",
        limits={"max_sheet_cells": 10_000},
    )


def test_pdf_page_cap(read) -> None:
    fails(read, "lppl.pdf", corpus_bytes("lppl.pdf"), PARSE_FAILED, "pages", limits={"max_pages": 3})


def test_input_size_cap(read) -> None:
    fails(
        read, "GPL-3.txt", corpus_bytes("GPL-3.txt"), PARSE_FAILED, "larger", limits={"max_input_bytes": 1000}
    )


def test_invalid_and_deep_json(read) -> None:
    fails(read, "bad.json", b'{"a": [1, 2,', PARSE_FAILED, "not valid JSON")
    fails(
        read,
        "deep.json",
        json.dumps(
            {"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}
        ).encode(),
        PARSE_FAILED,
        "nested",
    )
    fails(read, "deeper.json", b"[" * 100_000 + b"]" * 100_000, PARSE_FAILED)


def test_html_deeply_nested_does_not_crash(read) -> None:
    html = b"<html><body>" + b"<div>" * 5000 + b"deep text" + b"</div>" * 5000 + b"</body></html>"
    assert "deep text" in read("deep.html", data=html).markdown


def test_garbage_mhtml(read) -> None:
    fails(read, "page.mhtml", b"From: nobody\n\nno html here", PARSE_FAILED, "no HTML part")


def test_legacy_office_without_libreoffice(read, monkeypatch: pytest.MonkeyPatch) -> None:
    import chalicelib.parsers.libreoffice as libreoffice

    monkeypatch.setattr(libreoffice, "soffice_path", lambda: None)
    monkeypatch.setitem(sys.modules, "unword", None)  # without unword too: nothing reads a .doc
    msg = fails(read, "python-howto-logging.doc", corpus_bytes("python-howto-logging.doc"), UNSUPPORTED)
    assert "LibreOffice" in msg and ".docx" in msg


def test_zip_bomb_memory_stays_bounded(tmp_path) -> None:
    """A 600 MB-expanding docx under a 1 GB address-space limit: refused, not an out-of-memory crash."""
    script = textwrap.dedent(
        """
        import io, resource, sys, zipfile
        sys.path.insert(0, %r)
        resource.setrlimit(resource.RLIMIT_AS, (1536 * 1024 * 1024, 1536 * 1024 * 1024))
        from chalicelib.parsers import build_docreader
        from chalicelib.ports import ReadRequest
        from chalicelib.domain.errors import PermanentStageError
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.writestr("[Content_Types].xml", "<Types/>")
            with zf.open("word/document.xml", "w", force_zip64=True) as fh:
                chunk = b"\\0" * (16 * 1024 * 1024)
                for _ in range(38):
                    fh.write(chunk)
        data = buf.getvalue()
        try:
            build_docreader().read(ReadRequest(data=data, file_name="b.docx", file_type="docx"))
        except PermanentStageError as exc:
            print("REFUSED", exc.message)
        """
    ) % str(__import__("pathlib").Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "REFUSED" in proc.stdout and "zip bomb" in proc.stdout


@pytest.mark.requires_whisper
def test_a_whisper_model_that_does_not_match_its_pinned_hash_is_never_loaded(tmp_path) -> None:
    from chalicelib.parsers import asr

    parts = [asr._package_data_dir(p) for p in asr.WHISPER_PARTS]
    size = sum((d / f"model.bin.part{i + 1}").stat().st_size for i, d in enumerate(parts))  # type: ignore[operator]
    tampered = tmp_path / "model.bin"
    with open(tampered, "wb") as handle:  # right size, wrong bytes
        handle.truncate(size)
    with pytest.raises(asr.ModelIntegrityError):
        asr.assemble_whisper_model(tmp_path)
    assert not tampered.exists()
    assert (asr.assemble_whisper_model(tmp_path) / "model.bin.sha256").read_text() == asr.WHISPER_MODEL_SHA256


W_NS = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _table_document(rows: bytes, grid_columns: int = 2) -> bytes:
    grid = b"<w:tblGrid>" + b'<w:gridCol w:w="100"/>' * grid_columns + b"</w:tblGrid>"
    return b"<w:document " + W_NS + b"><w:body><w:tbl>" + grid + rows + b"</w:tbl></w:body></w:document>"


def _cell(text: bytes, properties: bytes = b"") -> bytes:
    return b"<w:tc><w:tcPr>" + properties + b"</w:tcPr><w:p><w:r><w:t>" + text + b"</w:t></w:r></w:p></w:tc>"


def _traced_peak_mb(action) -> float:
    import tracemalloc

    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_a_column_span_past_the_grid_is_held_to_the_grid(read) -> None:
    """A 30,000,000-column gridSpan in a small file took 7 GB and five minutes (found by a mutation fuzz)."""
    row = b"<w:tr>" + _cell(b"wide", b'<w:gridSpan w:val="30000000"/>') + _cell(b"next") + b"</w:tr>"
    data = docx_with(_table_document(row + b"<w:tr>" + _cell(b"a") + _cell(b"b") + b"</w:tr>"))
    results = []
    peak = _traced_peak_mb(lambda: results.append(read("span.docx", data=data)))
    assert peak < 64, peak
    assert "| wide | wide |" in results[0].markdown and "| a | b |" in results[0].markdown


def test_merged_cells_that_repeat_past_the_text_limit_are_refused_early(read) -> None:
    """A vertically merged cell repeats its text in every row it covers: 200 KB of text and a few bytes a
    row could ask for any size; the read stops at the limit instead of building it."""
    owner = b"<w:tr>" + _cell(b"x" * 200_000, b'<w:vMerge w:val="restart"/>') + b"</w:tr>"
    continued = b"<w:tr>" + _cell(b"", b"<w:vMerge/>") + b"</w:tr>"
    data = docx_with(_table_document(owner + continued * 3_000, grid_columns=1))
    peak = _traced_peak_mb(
        lambda: fails(
            read, "merged.docx", data, PARSE_FAILED, "merged cells", limits={"max_markdown_chars": 5_000_000}
        )
    )
    assert peak < 64, peak


def test_schema_invalid_numbers_cost_the_value_not_the_document(read) -> None:
    """A list level, a slide paragraph's level or a shape's offset that is not a number failed the whole file."""
    paragraph = b'<w:p><w:pPr><w:numPr><w:ilvl w:val="rId9"/><w:numId w:val="1"/></w:numPr></w:pPr><w:r><w:t>item</w:t></w:r></w:p>'
    document = b"<w:document " + W_NS + b"><w:body>" + paragraph + b"</w:body></w:document>"
    assert read("levels.docx", data=docx_with(document)).markdown.strip() == "- item"

    from pptx import Presentation

    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "Title"
    slide.placeholders[1].text_frame.text = "Point"
    box = slide.shapes.add_textbox(0, 0, 100, 100)
    box.text_frame.text = "Box"
    out = io.BytesIO()
    prs.save(out)
    source = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    damaged = io.BytesIO()
    with zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():
            part = source.read(name)
            if name == "ppt/slides/slide1.xml":
                part = part.replace(b"<a:pPr", b'<a:pPr lvl="x"', 1).replace(
                    b'<a:off x="0"', b'<a:off x="NaN"', 1
                )
                part = part.replace(b"<a:p><a:r>", b'<a:p><a:pPr lvl="x"/><a:r>')
            target.writestr(name, part)
    markdown = read("levels.pptx", data=damaged.getvalue()).markdown
    assert "# Title" in markdown and "Point" in markdown and "Box" in markdown


@pytest.mark.parametrize(
    "damage",
    [b"\xff\xfe", b"\x00\x80"],
    ids=["name-not-utf8", "name-with-nul"],
)
def test_a_zip_directory_that_zipfile_cannot_decode_is_a_parse_failure(read, damage: bytes) -> None:
    """A member name flagged UTF-8 that is not (UnicodeDecodeError) escaped the reader as a crash."""
    data = bytearray(corpus_bytes("python-howto-sorting.docx"))
    central = data.rfind(b"PK\x01\x02")
    flags = int.from_bytes(data[central + 8 : central + 10], "little")
    data[central + 8 : central + 10] = (flags | 0x800).to_bytes(2, "little")  # the name says it is UTF-8
    data[central + 46 : central + 48] = damage
    fails(read, "names.docx", bytes(data), PARSE_FAILED, "damaged")


def test_a_zip_version_zipfile_does_not_know_is_a_parse_failure(read) -> None:
    data = bytearray(corpus_bytes("python-howto-sorting.docx"))
    central = data.rfind(b"PK\x01\x02")
    data[central + 4] = 94  # "made by" version 9.4 with a create system zipfile refuses
    data[central + 6] = 94  # "needed to extract" 9.4
    fails(read, "version.docx", bytes(data), PARSE_FAILED, "damaged")


def _three_page_pdf(second_page: bytes) -> bytes:
    """Pages 1 and 3 with text; page 2's object is `second_page` (not a page: pdfium cannot load it)."""

    def content(text: bytes) -> bytes:
        ops = b"BT /F1 12 Tf 72 700 Td (" + text + b") Tj ET"
        return b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream"

    def page(contents: int) -> bytes:
        return (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 8 0 R >> >>"
            b" /Contents %d 0 R >>" % contents
        )

    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>",
        page(6),
        second_page,
        page(7),
        content(b"First page words about harbours"),
        content(b"Third page words about cranes"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    return out + b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)


@pytest.mark.parametrize("second_page", [b"(not a page)", b"null"], ids=["a-string", "null"])
def test_a_pdf_page_pdfium_cannot_load_is_lost_not_the_file(read, second_page: bytes) -> None:
    """A page pdfium could not load was taken for a scan, then failed the whole file when it was rendered
    (found by a mutation fuzz of the corpus PDFs)."""
    result = read("three.pdf", data=_three_page_pdf(second_page))
    assert result.markdown == "First page words about harbours\n\nThird page words about cranes\n"
    assert result.metadata["unreadable_pages"] == [2] and result.metadata["scanned_pages"] == []


def test_a_csv_quote_never_closed_keeps_the_rows_after_it(read) -> None:
    """`screen,"5 inch` folded every later row into that cell (Python's reader, like Excel's, reads on to
    the closing quote); the rows are kept and the metadata names the line."""
    result = read("sizes.csv", data=b'name,size\nscreen,"5 inch\nphone,6\nwatch,2\n')
    assert result.markdown.splitlines()[2:] == ['| screen | "5 inch |', "| phone | 6 |", "| watch | 2 |"]
    assert result.metadata["csv_unclosed_quote_line"] == 2
