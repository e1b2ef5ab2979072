"""Hostile inputs that once took minutes or gigabytes in the parsers: each ends bounded or fails clearly."""

from __future__ import annotations

import io
import json
import wave
import zipfile
import zlib

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import images
from chalicelib.parsers.images import ImageResolver, iter_markdown_images


def _resolver() -> ImageResolver:
    return ImageResolver(lambda data, ext: "s3://bucket/img" + ext, fetch_remote=False)


# ---------------------------------------------------------------- image resolver: no regex cliff


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "markdown",
    [
        '<img src="x" ' * 400,  # took 155 s: no tag ever closes
        '<img src="x" ' * 20_000 + ">",
        "[![" * 50_000,  # _LINKED_IMAGE scanned the line once per start
        "[![a](" * 50_000,
        "![" * 100_000,  # a bracket never closed, read to the end once per start
        "![a](" * 100_000,  # a destination never ended, likewise
    ],
    ids=["img-unclosed", "img-one-close", "linked-alt", "linked-dest", "md-bracket", "md-dest"],
)
def test_unclosed_image_markup_resolves_quickly_and_stays_text(markdown: str) -> None:
    assert _resolver().resolve(markdown).markdown == markdown


def test_html_img_src_read_inside_its_tag() -> None:
    md = '<img alt="it\'s" src=\'a.png\' title="x"> <IMG\nSRC="b.png"> <img alt=x>'
    tags = [m.group(0) for m in images._HTML_IMG.finditer(md)]
    srcs = [found.group(2) if (found := images._HTML_SRC.search(tag)) else "" for tag in tags]
    assert srcs == ["a.png", "b.png", ""]


def test_markdown_images_still_found_after_unclosed_starts() -> None:
    text = "![" * 10 + "\n\n![ok](pic.png 'title')"
    found = list(iter_markdown_images(text))
    assert [(img.alt, img.dest, img.title) for img in found] == [("ok", "pic.png", "title")]


# ---------------------------------------------------------------- PDF figure: a Flate bomb is not inflated


def test_pdf_figure_flate_bomb_is_never_inflated_past_its_size(read, monkeypatch) -> None:
    from test_pdf_figure_files import H, W, _pdf_with_image

    from chalicelib.parsers.pdf_pdfium import RawImage

    deflate = zlib.compressobj(9)
    bomb = b"".join(deflate.compress(bytes(1 << 20)) for _ in range(40)) + deflate.flush()  # 40 MB of rows
    document = _pdf_with_image(
        bomb,
        "/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode "
        f"/DecodeParms << /Predictor 12 /Colors 1 /Columns {W} >>",
    )
    decoded: list[int] = []
    get_data = RawImage.get_data

    def recording(self: RawImage, decode_simple: bool = False) -> object:
        data = get_data(self, decode_simple)
        if decode_simple:
            decoded.append(len(data))
        return data

    monkeypatch.setattr(RawImage, "get_data", recording)
    result = read("bomb.pdf", data=document)
    assert "A figure follows." in result.markdown
    assert max(decoded, default=0) <= W * H  # pdfium never asked for the 40 MB (its bitmap reads rows)


# ---------------------------------------------------------------- uneven tables: padding is capped

SMALL_CELLS = {"max_sheet_cells": 10_000}
RAGGED_CSV = ("h," * 200 + "\n" + "x\n" * 200).encode()  # 400 cells written, 40,200 once padded
RAGGED_HTML = (
    "<html><body><table><tr>" + "<td>h" * 200 + "</tr>" + "<tr><td>x" * 200 + "</table></body></html>"
).encode()


@pytest.mark.parametrize(("name", "data"), [("ragged.csv", RAGGED_CSV), ("ragged.html", RAGGED_HTML)])
def test_uneven_table_padded_past_the_cell_limit_fails(read, name: str, data: bytes) -> None:
    with pytest.raises(PermanentStageError, match=r"padded to its widest row .* over the limit"):
        read(name, data=data, limits=SMALL_CELLS)


def test_uneven_table_within_the_cell_limit_is_padded(read) -> None:
    markdown = read("ok.csv", data=b"a,b,c\n1\n2,3\n", limits=SMALL_CELLS).markdown
    assert markdown.splitlines() == ["| a | b | c |", "|---|---|---|", "| 1 |  |  |", "| 2 | 3 |  |"]


# ---------------------------------------------------------------- JSON: objects with keys of their own


def test_json_objects_with_keys_of_their_own_become_bullets_not_a_sparse_table(read) -> None:
    data = json.dumps([{f"k{i}": i} for i in range(1000)]).encode()  # was a 1000 × 1000 table, 3 MB
    markdown = read("sparse.json", data=data).markdown
    assert len(markdown) < 10 * len(data)
    assert "|---" not in markdown and "- **k999**: 999" in markdown


def test_json_objects_sharing_most_keys_stay_a_table(read) -> None:
    data = json.dumps([{"a": 1, "b": 2}, {"a": 3}, {"b": 4, "c": 5}]).encode()
    assert read("rows.json", data=data).markdown.splitlines() == [
        "| a | b | c |",
        "|---|---|---|",
        "| 1 | 2 |  |",
        "| 3 |  |  |",
        "|  | 4 | 5 |",
    ]


# ---------------------------------------------------------------- parts listed many times: read once, capped

_PML = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)
_RELS = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
_OFFICE_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
SMALL_TEXT = {"max_markdown_chars": 100_000}


def _zip(members: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return out.getvalue()


def _deck_listing_one_slide(times: int, text: str) -> bytes:
    slide = (
        f'<?xml version="1.0"?><p:sld {_PML}><p:cSld><p:spTree><p:sp><p:txBody><a:p><a:r><a:t>{text}'
        "</a:t></a:r></a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    )
    ids = "".join(f'<p:sldId id="{256 + i}" r:id="rId2"/>' for i in range(times))
    return _zip(
        {
            "[Content_Types].xml": '<?xml version="1.0"?><Types '
            'xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="xml" ContentType="application/xml"/></Types>',
            "_rels/.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship Id="rId1" '
            f'Type="{_OFFICE_REL}/officeDocument" Target="ppt/presentation.xml"/></Relationships>',
            "ppt/presentation.xml": f'<?xml version="1.0"?><p:presentation {_PML}><p:sldIdLst>{ids}'
            "</p:sldIdLst></p:presentation>",
            "ppt/_rels/presentation.xml.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship '
            f'Id="rId2" Type="{_OFFICE_REL}/slide" Target="slides/slide1.xml"/></Relationships>',
            "ppt/slides/slide1.xml": slide,
        }
    )


def _epub_spine_listing_one_chapter(times: int, text: str) -> bytes:
    items = '<itemref idref="c1"/>' * times
    return _zip(
        {
            "mimetype": "application/epub+zip",
            "META-INF/container.xml": '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles><rootfile '
            'full-path="content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>',
            "content.opf": '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
            '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>T</dc:title></metadata>'
            '<manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/></manifest>'
            f"<spine>{items}</spine></package>",
            "c1.xhtml": '<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml">'
            f"<body><p>{text}</p></body></html>",
        }
    )


def _counting(monkeypatch, module: object, name: str) -> list[int]:
    calls: list[int] = []
    original = getattr(module, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_pptx_slide_listed_many_times_is_read_once_and_capped_as_it_grows(read, monkeypatch) -> None:
    from chalicelib.parsers import slides

    shape_reads = _counting(monkeypatch, slides, "_slide_lines")
    deck = _deck_listing_one_slide(400, "word " * 2_000)  # 10 KB a slide, 4 MB in all
    with pytest.raises(PermanentStageError, match="more than 100,000 characters"):
        read("repeat.pptx", data=deck, limits=SMALL_TEXT)
    assert len(shape_reads) == 1
    markdown = read("twice.pptx", data=_deck_listing_one_slide(2, "hello")).markdown
    assert markdown == "<!-- Slide number: 1 -->\n\nhello\n\n<!-- Slide number: 2 -->\n\nhello\n"


def test_epub_chapter_listed_many_times_is_converted_once_and_capped_as_it_grows(read, monkeypatch) -> None:
    from chalicelib.parsers import html

    conversions = _counting(monkeypatch, html, "html_to_markdown")
    book = _epub_spine_listing_one_chapter(400, "word " * 2_000)
    with pytest.raises(PermanentStageError, match="more than 100,000 characters"):
        read("spine.epub", data=book, limits=SMALL_TEXT)
    assert len(conversions) == 1
    assert (
        read("twice.epub", data=_epub_spine_listing_one_chapter(2, "hello")).markdown
        == "# T\n\nhello\n\nhello\n"
    )


# ---------------------------------------------------------------- docx: nested paragraphs


def _docx(body: str) -> bytes:
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    return _zip(
        {
            "[Content_Types].xml": '<?xml version="1.0"?><Types '
            'xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
            "</Types>",
            "_rels/.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship Id="rId1" '
            f'Type="{_OFFICE_REL}/officeDocument" Target="word/document.xml"/></Relationships>',
            "word/document.xml": f'<?xml version="1.0"?><w:document {w}><w:body>{body}</w:body></w:document>',
        }
    )


@pytest.mark.parametrize("container", ["table", "content-control"])
def test_docx_nested_paragraphs_give_their_text_once(read, container: str) -> None:
    nested = "<w:p>" * 50 + "<w:r><w:t>needle</w:t></w:r>" + "</w:p>" * 50
    if container == "table":
        body = f"<w:tbl><w:tr><w:tc>{nested}</w:tc><w:tc><w:p><w:r><w:t>b</w:t></w:r></w:p></w:tc></w:tr></w:tbl>"
    else:
        body = f"<w:sdt><w:sdtContent>{nested}</w:sdtContent></w:sdt>"
    assert read("nested.docx", data=_docx(body)).markdown.count("needle") == 1


# ---------------------------------------------------------------- a truncated package is not its embedded one


def test_truncated_pptx_is_damaged_not_the_workbook_embedded_in_it(read) -> None:
    import openpyxl

    book = openpyxl.Workbook()
    book.active.append(["Quarter", "Sales"])
    workbook = io.BytesIO()
    book.save(workbook)
    deck = io.BytesIO()
    with (
        zipfile.ZipFile(deck, "w") as out,
        zipfile.ZipFile(io.BytesIO(_deck_listing_one_slide(1, "hi"))) as zf,
    ):
        for info in zf.infolist():
            out.writestr(info, zf.read(info))
        # stored, not deflated, as Office stores an embedded package
        out.writestr("ppt/embeddings/Microsoft_Excel_Sheet1.xlsx", workbook.getvalue())
        embedded_end = out.fp.tell()  # type: ignore[union-attr]
    cut = deck.getvalue()[:embedded_end]  # the upload stopped right after the embedded workbook
    assert read("whole.pptx", data=deck.getvalue()).markdown.startswith("<!-- Slide number: 1 -->")
    with pytest.raises(PermanentStageError, match="damaged or truncated"):
        read("cut.pptx", data=cut)


# ---------------------------------------------------------------- text encodings

ZH = "中华人民共和国宪法。第一条 中华人民共和国是工人阶级领导的社会主义国家。\n"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (ZH.encode() * 20 + b"\xff", ZH * 20 + "\ufffd"),  # one invalid byte
        ("Résumé — déjà vu. ".encode() * 50 + b"\x96", "Résumé — déjà vu. " * 50 + "\ufffd"),  # a cp1252 dash
        ("대한민국 헌법\n".encode() * 30 + "국".encode()[:2], "대한민국 헌법\n" * 30 + "\ufffd"),  # cut short
    ],
    ids=["one-bad-byte", "stray-cp1252", "truncated"],
)
def test_nearly_all_utf8_text_stays_utf8(read, data: bytes, expected: str) -> None:
    assert read("notes.txt", data=data).markdown == expected


def test_legacy_encoded_text_after_a_long_ascii_start_is_detected(read) -> None:
    data = b"ascii line of text here\n" * 90_000 + ZH.encode("gbk")  # the non-ASCII starts past 2 MB
    assert read("big.txt", data=data).markdown.endswith(ZH)


EN = "Hello world, plain English text in UTF-16.\nA second line, with a comma.\n"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("notes.txt", EN.encode("utf-16-le")),
        ("notes.txt", EN.encode("utf-16-be")),
        ("notes.md", EN.encode("utf-32")),
        ("rows.csv", "name,city\nAda,London\nLi,Beijing\n".encode("utf-16-le")),
    ],
    ids=["utf16le-no-bom", "utf16be-no-bom", "utf32-bom", "csv-utf16le-no-bom"],
)
def test_wide_text_without_a_byte_order_mark_is_read_not_refused_as_binary(
    read, name: str, data: bytes
) -> None:
    markdown = read(name, data=data).markdown
    assert "\x00" not in markdown and ("London" in markdown or "plain English text" in markdown)


ZH_LINES = "这是一个测试文件。\n它包含中文文本，没有字节顺序标记。\n第三行 有空格 和 数字 123。\n" * 3
KO_LINES = "이것은 한국어 텍스트입니다.\n줄 바꿈이 있습니다.\n" * 3
RU_LINES = "Это русский текст без метки порядка байтов.\nВторая строка.\n" * 2


@pytest.mark.parametrize("text", [ZH_LINES, KO_LINES, RU_LINES], ids=["zh", "ko", "ru"])
@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_text_with_few_nuls_is_read_by_what_it_decodes_to(read, text: str, codec: str) -> None:
    """Its only NULs are its spaces' and line breaks' zero halves (and "一" U+4E00's on the other side)."""
    markdown = read("notes.txt", data=text.encode(codec)).markdown
    assert markdown.strip() == text.strip()


def test_binary_data_with_few_nuls_on_one_side_is_still_refused(read) -> None:
    """16-bit numbers: NULs on one side only, but they decode to no written script."""
    import random

    numbers = random.Random(7)
    data = b"".join(numbers.randrange(256, 40_000).to_bytes(2, "little") for _ in range(2_000))
    data = data[:1000] + b"\x05\x00" + data[1000:]
    with pytest.raises(PermanentStageError, match="binary data"):
        read("notes.txt", data=data)


def test_binary_data_with_nuls_on_both_sides_is_still_refused(read) -> None:
    data = bytes(range(256)) * 16
    with pytest.raises(PermanentStageError, match="binary data"):
        read("notes.txt", data=data)


# ---------------------------------------------------------------- local ASR: a recording's length


def test_local_asr_refuses_a_recording_over_the_length_limit_before_decoding(monkeypatch) -> None:
    from chalicelib.parsers import asr

    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setparams((1, 2, 8000, 0, "NONE", "not compressed"))
        wav.writeframes(bytes(2 * 8000 * 120))  # two minutes of silence
    monkeypatch.setattr(asr, "MAX_AUDIO_SECONDS", 60, raising=False)
    engine = asr.WhisperAsr()
    monkeypatch.setattr(engine, "available", lambda: True)

    def no_model() -> None:
        raise AssertionError("the recording was decoded")

    monkeypatch.setattr(engine, "_load", no_model)
    with pytest.raises(PermanentStageError, match="is 2 minutes long; the limit is 1 minutes"):
        engine.transcribe(out.getvalue(), "long.wav")
